// Package demo is the small upstream that `idemgate demo` starts behind the
// proxy: an in-memory, deliberately non-idempotent legacy commerce API, the
// kind of service idemgate exists to protect.
//
// Every write it runs is counted, so a person trying the demo can see that a
// write retried through idemgate with the same Idempotency-Key ran once, and
// that the same retry sent straight to this server runs twice: a second cart
// is created, or a second checkout of one cart fails with 409.
//
// Routes (Go 1.22+ [http.ServeMux] patterns):
//
//	POST /ucp/v1/carts                               create a cart: 201, Location
//	GET  /ucp/v1/carts/{id}                          read a cart
//	PUT  /ucp/v1/carts/{id}                          replace a cart's items
//	POST /ucp/v1/checkout-sessions/{id}/complete     check cart {id} out into an order: 201, Location
//	GET  /ucp/v1/orders/{id}                         read an order
//	GET  /demo/stats                                 the [Stats] as JSON
//
// Cart bodies are JSON objects whose "items" member, when present, is an array
// (any elements), kept and echoed back as sent. Ids are sequential: cart_1,
// cart_2, ... and order_1, order_2, .... Errors are JSON objects of the form
// {"error":{"code":"...","message":"..."}}: 400 for a body that is not valid
// JSON of the right shape or a bad delay, 404 for an unknown cart, order or
// path, 405 for a known path with another method, 409 for a write to a cart
// that was already checked out, 413 for a body over [Options.MaxBodyBytes]
// and 503 when [Options.MaxCarts] carts exist.
//
// A write may carry ?delay=<duration> (time.ParseDuration syntax, at most
// maxDelay; longer values are cut to it) to simulate a slow upstream: the
// server waits that long before it runs the write, so a retry sent meanwhile
// through idemgate gets 409 idempotency_in_progress. If the request's context
// ends while it waits, the write does not run and is not counted.
package demo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// maxDelay is the longest wait a ?delay= query can ask for; longer delays are
// cut to it.
const maxDelay = 5 * time.Second

// Defaults used for zero [Options] fields.
const (
	defaultMaxBodyBytes = 1 << 20
	defaultMaxCarts     = 10000
)

// Options configures a [Server]. The zero value is ready to use.
type Options struct {
	// Now returns the current time, used for created_at and updated_at.
	// Nil means time.Now. The delay of ?delay= always uses real timers (or
	// a testing/synctest bubble's fake ones).
	Now func() time.Time

	// MaxBodyBytes caps a request body; a larger one is refused with 413.
	// Zero or less means defaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64

	// MaxCarts caps how many carts the server holds (carts are never
	// deleted, and each holds at most one order), so that a demo left
	// running cannot grow without bound; creating one more gets 503.
	// Zero or less means defaultMaxCarts.
	MaxCarts int
}

// Stats counts what a [Server] has done since it was created.
type Stats struct {
	// Executions is the number of writes the server has run: every POST
	// or PUT that got past body parsing and its delay and reached the
	// cart and order state, whatever its outcome (so a duplicate checkout
	// refused with 409 counts: the write reached the upstream). Requests
	// refused with 400 or 413, or whose context ended during their delay,
	// do not count.
	Executions int64 `json:"executions"`

	// ByRoute splits Executions by the route's ServeMux pattern, method
	// included, such as "POST /ucp/v1/carts". Routes not yet run are
	// absent.
	ByRoute map[string]int64 `json:"by_route"`

	// Carts and Orders are the numbers of carts and orders that exist.
	Carts  int `json:"carts"`
	Orders int `json:"orders"`
}

// Server is the demo upstream, an [http.Handler]. Create it with [New]; it
// is safe for concurrent use. All state is in memory and lost with it.
type Server struct {
	mux          *http.ServeMux
	now          func() time.Time
	maxBodyBytes int64
	maxCarts     int

	mu         sync.Mutex // protects executions, byRoute, carts, orders
	executions int64
	byRoute    map[string]int64
	carts      map[string]*cart
	orders     map[string]*order
}

type cart struct {
	id        string
	items     json.RawMessage
	orderID   string // set once the cart is checked out
	createdAt time.Time
	updatedAt time.Time
}

type order struct {
	id        string
	cartID    string
	items     json.RawMessage
	createdAt time.Time
}

// Route patterns, also the keys of [Stats.ByRoute] for writes.
const (
	patCreateCart = "POST /ucp/v1/carts"
	patGetCart    = "GET /ucp/v1/carts/{id}"
	patPutCart    = "PUT /ucp/v1/carts/{id}"
	patComplete   = "POST /ucp/v1/checkout-sessions/{id}/complete"
	patGetOrder   = "GET /ucp/v1/orders/{id}"
	patStats      = "GET /demo/stats"
)

// New returns a Server configured by opts.
func New(opts Options) *Server {
	s := &Server{
		mux:          http.NewServeMux(),
		now:          opts.Now,
		maxBodyBytes: opts.MaxBodyBytes,
		maxCarts:     opts.MaxCarts,
		byRoute:      make(map[string]int64),
		carts:        make(map[string]*cart),
		orders:       make(map[string]*order),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.maxBodyBytes <= 0 {
		s.maxBodyBytes = defaultMaxBodyBytes
	}
	if s.maxCarts <= 0 {
		s.maxCarts = defaultMaxCarts
	}

	s.mux.HandleFunc(patCreateCart, s.createCart)
	s.mux.HandleFunc(patGetCart, s.getCart)
	s.mux.HandleFunc(patPutCart, s.putCart)
	s.mux.HandleFunc(patComplete, s.complete)
	s.mux.HandleFunc(patGetOrder, s.getOrder)
	s.mux.HandleFunc(patStats, s.stats)

	// Method-less patterns are less specific than the ones above, so they
	// only catch other methods on known paths, and answer in JSON rather
	// than ServeMux's plain-text 405 and 404.
	s.mux.Handle("/ucp/v1/carts", methodNotAllowed("POST"))
	s.mux.Handle("/ucp/v1/carts/{id}", methodNotAllowed("GET, HEAD, PUT"))
	s.mux.Handle("/ucp/v1/checkout-sessions/{id}/complete", methodNotAllowed("POST"))
	s.mux.Handle("/ucp/v1/orders/{id}", methodNotAllowed("GET, HEAD"))
	s.mux.Handle("/demo/stats", methodNotAllowed("GET, HEAD"))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such resource")
	})
	return s
}

// ServeHTTP implements [http.Handler].
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mux.ServeHTTP(w, r)
}

// Stats returns a snapshot of the server's counts; the caller owns the
// returned map.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		Executions: s.executions,
		ByRoute:    maps.Clone(s.byRoute),
		Carts:      len(s.carts),
		Orders:     len(s.orders),
	}
}

// cartJSON is a cart as the API shows it. Execution is set on write answers
// only.
type cartJSON struct {
	ID        string          `json:"id"`
	Items     json.RawMessage `json:"items"`
	Status    string          `json:"status"`
	OrderID   string          `json:"order_id,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	UpdatedAt time.Time       `json:"updated_at"`
	Execution int64           `json:"execution,omitempty"`
}

// orderJSON is an order as the API shows it. Execution is set on write
// answers only.
type orderJSON struct {
	ID        string          `json:"id"`
	CartID    string          `json:"cart_id"`
	Items     json.RawMessage `json:"items"`
	Status    string          `json:"status"`
	CreatedAt time.Time       `json:"created_at"`
	Execution int64           `json:"execution,omitempty"`
}

func (c *cart) view(execution int64) cartJSON {
	status := "open"
	if c.orderID != "" {
		status = "checked_out"
	}
	return cartJSON{
		ID:        c.id,
		Items:     c.items,
		Status:    status,
		OrderID:   c.orderID,
		CreatedAt: c.createdAt,
		UpdatedAt: c.updatedAt,
		Execution: execution,
	}
}

func (o *order) view(execution int64) orderJSON {
	return orderJSON{
		ID:        o.id,
		CartID:    o.cartID,
		Items:     o.items,
		Status:    "completed",
		CreatedAt: o.createdAt,
		Execution: execution,
	}
}

// countLocked records one execution of the write route pattern and returns
// the new total. s.mu must be held.
func (s *Server) countLocked(pattern string) int64 {
	s.executions++
	s.byRoute[pattern]++
	return s.executions
}

// readCartWrite reads a cart write's body and honours its delay. It
// returns the items; when the write must not run it has answered the
// request and reports false.
func (s *Server) readCartWrite(w http.ResponseWriter, r *http.Request) (json.RawMessage, bool) {
	items, ok := s.readItems(w, r)
	return items, ok && s.wait(w, r)
}

// apiError is the answer of a write refused under s.mu, written once
// s.mu is unlocked.
type apiError struct {
	status    int
	code, msg string
}

func (e *apiError) write(w http.ResponseWriter) { writeError(w, e.status, e.code, e.msg) }

func (s *Server) createCart(w http.ResponseWriter, r *http.Request) {
	items, ok := s.readCartWrite(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	v, refused := s.createCartLocked(items)
	s.mu.Unlock()
	if refused != nil {
		refused.write(w)
		return
	}
	writeCreated(w, "/ucp/v1/carts/"+v.ID, v)
}

// createCartLocked counts a cart creation and runs it. s.mu must be held.
func (s *Server) createCartLocked(items json.RawMessage) (cartJSON, *apiError) {
	n := s.countLocked(patCreateCart)
	if len(s.carts) >= s.maxCarts {
		return cartJSON{}, &apiError{http.StatusServiceUnavailable, "capacity_exceeded",
			fmt.Sprintf("the demo holds at most %d carts", s.maxCarts)}
	}
	now := s.now().UTC()
	c := &cart{
		id:        "cart_" + strconv.Itoa(len(s.carts)+1),
		items:     items,
		createdAt: now,
		updatedAt: now,
	}
	s.carts[c.id] = c
	return c.view(n), nil
}

func (s *Server) getCart(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, s.carts, r.PathValue("id"), (*cart).view, "cart_not_found", "no such cart")
}

// getOne answers a read of the cart or order id of m: 200 with its view, or
// 404 with code and msg.
func getOne[T any, V any](s *Server, w http.ResponseWriter, m map[string]T, id string, view func(T, int64) V, code, msg string) {
	s.mu.Lock()
	x, ok := m[id]
	var v V
	if ok {
		v = view(x, 0)
	}
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, code, msg)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) putCart(w http.ResponseWriter, r *http.Request) {
	items, ok := s.readCartWrite(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	v, refused := s.putCartLocked(r.PathValue("id"), items)
	s.mu.Unlock()
	if refused != nil {
		refused.write(w)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// putCartLocked counts a write of cart id's items and runs it. s.mu must
// be held.
func (s *Server) putCartLocked(id string, items json.RawMessage) (cartJSON, *apiError) {
	n := s.countLocked(patPutCart)
	c, refused := s.openCartLocked(id)
	if refused != nil {
		return cartJSON{}, refused
	}
	c.items = items
	c.updatedAt = s.now().UTC()
	return c.view(n), nil
}

// openCartLocked returns cart id if it is still open, or the refusal: 404
// when it is unknown, 409 when it was checked out already. s.mu must be
// held.
func (s *Server) openCartLocked(id string) (*cart, *apiError) {
	c, ok := s.carts[id]
	switch {
	case !ok:
		return nil, &apiError{http.StatusNotFound, "cart_not_found", "no such cart"}
	case c.orderID != "":
		// The harm idemgate prevents: a retried checkout that already
		// succeeded now fails, and the client cannot tell it succeeded.
		return nil, &apiError{http.StatusConflict, "cart_checked_out",
			"the cart was already checked out as " + c.orderID}
	}
	return c, nil
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	// The body (payment details in a real API) is optional and ignored,
	// but when sent it must be JSON.
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	if len(body) > 0 && !json.Valid(body) {
		writeError(w, http.StatusBadRequest, "invalid_json", "the request body is not valid JSON")
		return
	}
	if !s.wait(w, r) {
		return
	}
	s.mu.Lock()
	v, refused := s.completeLocked(r.PathValue("id"))
	s.mu.Unlock()
	if refused != nil {
		refused.write(w)
		return
	}
	writeCreated(w, "/ucp/v1/orders/"+v.ID, v)
}

// completeLocked counts a checkout of cart id and runs it. s.mu must be
// held.
func (s *Server) completeLocked(id string) (orderJSON, *apiError) {
	n := s.countLocked(patComplete)
	c, refused := s.openCartLocked(id)
	if refused != nil {
		return orderJSON{}, refused
	}
	o := &order{
		id:        "order_" + strconv.Itoa(len(s.orders)+1),
		cartID:    c.id,
		items:     c.items,
		createdAt: s.now().UTC(),
	}
	s.orders[o.id] = o
	c.orderID = o.id
	c.updatedAt = o.createdAt
	return o.view(n), nil
}

func (s *Server) getOrder(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, s.orders, r.PathValue("id"), (*order).view, "order_not_found", "no such order")
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

// readBody reads the whole request body, up to s.maxBodyBytes. On failure it
// answers the request and reports false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("the request body is over %d bytes", s.maxBodyBytes))
			return nil, false
		}
		writeError(w, http.StatusBadRequest, "unreadable_body", "the request body could not be read")
		return nil, false
	}
	return body, true
}

// readItems reads a cart body, a JSON object whose optional "items" member
// is an array, and returns the items as sent ("[]" when absent). On failure
// it answers the request and reports false.
func (s *Server) readItems(w http.ResponseWriter, r *http.Request) (json.RawMessage, bool) {
	body, ok := s.readBody(w, r)
	if !ok {
		return nil, false
	}
	// json.Unmarshal rejects trailing data; it replaces invalid UTF-8 and
	// keeps the last of duplicate members, which is fine for a demo.
	var req struct {
		Items *json.RawMessage `json:"items"`
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' ||
		json.Unmarshal(body, &req) != nil {
		writeError(w, http.StatusBadRequest, "invalid_json",
			`the request body must be a JSON object like {"items":[...]}`)
		return nil, false
	}
	if req.Items == nil || string(*req.Items) == "null" {
		return json.RawMessage("[]"), true
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(*req.Items, &elems); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_items", `"items" must be an array`)
		return nil, false
	}
	return *req.Items, true
}

// wait honours the ?delay= query of a write. It reports whether the write
// should run; if not, it has answered the request (400 for a bad delay, 503
// when the request's context ended first).
func (s *Server) wait(w http.ResponseWriter, r *http.Request) bool {
	q := r.URL.Query().Get("delay")
	if q == "" {
		return true
	}
	d, err := time.ParseDuration(q)
	if err != nil || d < 0 {
		writeError(w, http.StatusBadRequest, "invalid_delay",
			`delay must be a non-negative duration such as "200ms"`)
		return false
	}
	d = min(d, maxDelay)
	if d == 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		// The client (or idemgate) gave up: nothing ran, and the answer
		// most likely reaches nobody.
		writeError(w, http.StatusServiceUnavailable, "cancelled",
			"the request was cancelled before it ran")
		return false
	}
}

func methodNotAllowed(allow string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
			r.Method+" is not allowed here")
	})
}

type errorJSON struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorJSON{errorBody{Code: code, Message: msg}})
}

// writeCreated answers 201 with v, the new resource at location.
func writeCreated(w http.ResponseWriter, location string, v any) {
	w.Header().Set("Location", location)
	writeJSON(w, http.StatusCreated, v)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own types are encoded, and they always marshal.
		panic(fmt.Sprintf("demo: encoding %T: %v", v, err))
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
