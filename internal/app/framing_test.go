package app

// Issue 28, item 2 (DESIGN.md, Hardening (revision 3)): the TLS listener
// obeys Bounds as the plain one does, over HTTP/1.1 and HTTP/2: a request
// with both Content-Length and Transfer-Encoding closes its connection
// (the request hidden in its body never runs), and max_header_bytes is
// exact. Raw sockets: crypto/tls clients writing raw bytes, and raw HTTP/2
// frames.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/idemgate/idemgate/tlsconf/tlstest"
)

// framingApp is a running idemgate whose upstream records the paths it
// serves.
type framingApp struct {
	app   *App
	addr  string
	roots *x509.CertPool // nil: plain listener
	mu    sync.Mutex
	paths []string
}

func (a *framingApp) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.paths...)
}

// startFramingApp runs idemgate with max_header_bytes at its default
// (65,536) and no routes, over TLS (tls.mode files) or plain.
func startFramingApp(t *testing.T, useTLS bool) *framingApp {
	t.Helper()
	fa := &framingApp{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		fa.mu.Lock()
		fa.paths = append(fa.paths, r.URL.Path)
		fa.mu.Unlock()
		fmt.Fprintf(w, "upstream %s %s", r.URL.Path, r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(up.Close)
	yaml := `
upstream: {url: "` + up.URL + `"}
edge_limit: {rate: 0}
`
	if !useTLS {
		a, err := New(e2eConfig(t, yaml), Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		fa.app, fa.addr = a, strings.TrimPrefix(serveTestApp(t, a), "http://")
		return fa
	}
	ca := tlstest.NewCA(t)
	sec := &tlstest.SecretDir{Dir: t.TempDir()}
	crt, key := ca.Leaf(t, 1, time.Now().Add(time.Hour))
	sec.Write(t, map[string][]byte{"tls.crt": crt, "tls.key": key})
	yaml += `tls:
  mode: files
  cert_file: ` + filepath.Join(sec.Dir, "tls.crt") + `
  key_file: ` + filepath.Join(sec.Dir, "tls.key") + `
  http_listen: ""
`
	ta := startTLSApp(t, tlsConfig(t, yaml))
	fa.app, fa.addr, fa.roots = ta.app, ta.https, ca.Pool
	return fa
}

// dial opens a raw connection to the app: TLS offering alpn when the app
// serves TLS.
func (a *framingApp) dial(t *testing.T, alpn string) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	if a.roots == nil {
		c, err = net.Dial("tcp", a.addr)
	} else {
		c, err = tls.Dial("tcp", a.addr, &tls.Config{RootCAs: a.roots, ServerName: "localhost", NextProtos: []string{alpn}})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// exchange1 writes raw on a new HTTP/1.1 connection and reads answers
// until the server closes it (closed) or the deadline passes.
func (a *framingApp) exchange1(t *testing.T, raw string) (statuses []int, closeHeader, closed bool) {
	t.Helper()
	c := a.dial(t, "http/1.1")
	go io.WriteString(c, raw)
	br := bufio.NewReader(c)
	for {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			return statuses, closeHeader, !(errors.As(err, &ne) && ne.Timeout())
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		statuses = append(statuses, res.StatusCode)
		closeHeader = closeHeader || res.Close
	}
}

// TestFramingConflictClosesConnection: a request with both Content-Length
// and Transfer-Encoding is answered with Connection: close and the
// connection ends, so the request a Content-Length front proxy would have
// read as its body never runs, on the plain and the TLS listener.
func TestFramingConflictClosesConnection(t *testing.T) {
	t.Parallel()
	const hidden = "GET /hidden HTTP/1.1\r\nHost: x\r\n\r\n"
	body := "0\r\n\r\n" + hidden // a Content-Length front reads all of it as the body
	for _, tc := range []struct {
		name, head string
		first      int // the first answer's status
	}{
		{"Content-Length then Transfer-Encoding", fmt.Sprintf("Content-Length: %d\r\nTransfer-Encoding: chunked\r\n", len(body)), http.StatusOK},
		{"Transfer-Encoding then Content-Length", fmt.Sprintf("Transfer-Encoding: chunked\r\nContent-Length: %d\r\n", len(body)), http.StatusOK},
		{"odd casing and whitespace", fmt.Sprintf("transfer-ENCODING: \t CHUNKED \t\r\ncontent-length:  %d\r\n", len(body)), http.StatusOK},
		{"Transfer-Encoding listed twice", fmt.Sprintf("Transfer-Encoding: chunked\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n", len(body)), http.StatusNotImplemented},
	} {
		for _, useTLS := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tls=%v", tc.name, useTLS), func(t *testing.T) {
				t.Parallel()
				app := startFramingApp(t, useTLS)
				raw := "POST /front HTTP/1.1\r\nHost: x\r\n" + tc.head + "\r\n" + body
				statuses, closeHeader, closed := app.exchange1(t, raw)
				if len(statuses) != 1 || statuses[0] != tc.first {
					t.Errorf("answers %v; want one %d", statuses, tc.first)
				}
				if !closeHeader || !closed {
					t.Errorf("Connection: close %v, connection closed %v; want both", closeHeader, closed)
				}
				for _, p := range app.seen() {
					if p == "/hidden" {
						t.Errorf("the hidden request reached the upstream (upstream saw %q)", app.seen())
					}
				}
			})
		}
	}
}

// h1Head returns a GET head of exactly n bytes.
func h1Head(t *testing.T, path string, n int) string {
	h := "GET " + path + " HTTP/1.1\r\nHost: x\r\nX-Pad: "
	h += strings.Repeat("p", n-len(h)-4) + "\r\n\r\n"
	if len(h) != n {
		t.Fatalf("head is %d bytes; want %d", len(h), n)
	}
	return h
}

// TestMaxHeaderBytesExactHTTP1: over HTTP/1.1, on the plain and the TLS
// listener, a head of exactly max_header_bytes (65,536) is served and one
// byte more gets 431 (net/http alone lets 4,096 more through).
func TestMaxHeaderBytesExactHTTP1(t *testing.T) {
	t.Parallel()
	for _, useTLS := range []bool{false, true} {
		for _, tc := range []struct {
			n, want int
		}{
			{65536, http.StatusOK},
			{65537, http.StatusRequestHeaderFieldsTooLarge},
			{66000, http.StatusRequestHeaderFieldsTooLarge},
		} {
			t.Run(fmt.Sprintf("tls=%v/%d", useTLS, tc.n), func(t *testing.T) {
				t.Parallel()
				app := startFramingApp(t, useTLS)
				path := fmt.Sprintf("/h1-%d", tc.n)
				statuses, _, _ := app.exchange1(t, h1Head(t, path, tc.n))
				if len(statuses) != 1 || statuses[0] != tc.want {
					t.Fatalf("answers %v; want one %d", statuses, tc.want)
				}
				if reached := len(app.seen()) == 1; reached != (tc.want == http.StatusOK) {
					t.Errorf("upstream saw %q", app.seen())
				}
			})
		}
	}
}

// h2Conn is a raw HTTP/2 client connection over TLS (ALPN "h2").
type h2Conn struct {
	t  *testing.T
	c  net.Conn
	fr *http2.Framer
	// The server's SETTINGS_MAX_HEADER_LIST_SIZE (0: not sent).
	maxHeaderList uint32
}

func (a *framingApp) dialH2(t *testing.T) *h2Conn {
	t.Helper()
	c := a.dial(t, "h2")
	if p := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN = %q; want h2", p)
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return &h2Conn{t: t, c: c, fr: fr}
}

// fieldsSize is the header list size of RFC 9113 §6.5.2.
func fieldsSize(fields []hpack.HeaderField) int {
	n := 0
	for _, f := range fields {
		n += int(f.Size())
	}
	return n
}

// request sends fields as one request on stream id (HEADERS and
// CONTINUATION frames of at most 16 KiB, the default frame size), with
// body if not empty, and returns the answer's status (0: no answer; the
// connection ended).
func (h *h2Conn) request(id uint32, fields []hpack.HeaderField, body string) int {
	h.t.Helper()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		if err := enc.WriteField(f); err != nil {
			h.t.Fatal(err)
		}
	}
	b := block.Bytes()
	const frame = 16 << 10
	first := b[:min(len(b), frame)]
	b = b[len(first):]
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: body == "", EndHeaders: len(b) == 0}); err != nil {
		h.t.Fatal(err)
	}
	for len(b) > 0 {
		part := b[:min(len(b), frame)]
		b = b[len(part):]
		if err := h.fr.WriteContinuation(id, len(b) == 0, part); err != nil {
			h.t.Fatal(err)
		}
	}
	if body != "" {
		if err := h.fr.WriteData(id, true, []byte(body)); err != nil {
			h.t.Fatal(err)
		}
	}
	for range 1000 {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return 0
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingMaxHeaderListSize); ok {
					h.maxHeaderList = v
				}
				h.fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				var status int
				fmt.Sscan(f.PseudoValue("status"), &status)
				return status
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return 0
			}
		case *http2.GoAwayFrame:
			return 0
		}
	}
	h.t.Fatal("no answer within 1000 frames")
	return 0
}

// h2Fields returns a GET's header list of exactly n bytes (RFC 9113
// §6.5.2), padded by one x-pad field.
func h2Fields(t *testing.T, path string, n int) []hpack.HeaderField {
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "GET"},
		{Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "localhost"},
		{Name: ":path", Value: path},
	}
	pad := hpack.HeaderField{Name: "x-pad"}
	pad.Value = strings.Repeat("p", n-fieldsSize(fields)-int(pad.Size()))
	fields = append(fields, pad)
	if got := fieldsSize(fields); got != n {
		t.Fatalf("header list is %d bytes; want %d", got, n)
	}
	return fields
}

// TestMaxHeaderBytesExactHTTP2: over HTTP/2 max_header_bytes is the header
// list size (names, values and 32 bytes a field, pseudo-headers included),
// advertised as SETTINGS_MAX_HEADER_LIST_SIZE: a list of exactly 65,536
// bytes is served, one byte more gets 431 (Go alone allows 320 more). A
// single field longer than the limit ends the connection (Go's HPACK
// decoder refuses the string), so the test stays at the boundary.
func TestMaxHeaderBytesExactHTTP2(t *testing.T) {
	t.Parallel()
	app := startFramingApp(t, true)
	for _, tc := range []struct {
		n, want int
	}{
		{65536, http.StatusOK},
		{65537, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			h := app.dialH2(t)
			path := fmt.Sprintf("/h2-%d", tc.n)
			if got := h.request(1, h2Fields(t, path, tc.n), ""); got != tc.want {
				t.Fatalf("status %d; want %d", got, tc.want)
			}
			if h.maxHeaderList != 65536 {
				t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE = %d; want 65536", h.maxHeaderList)
			}
			reached := false
			for _, p := range app.seen() {
				reached = reached || p == path
			}
			if reached != (tc.want == http.StatusOK) {
				t.Errorf("upstream saw %q", app.seen())
			}
		})
	}
}

// TestFramingConflictHTTP2: HTTP/2 frames bodies itself and forbids
// Transfer-Encoding (RFC 9113 §8.2.2): a request with it and
// Content-Length is refused (400) before any handler, so nothing runs and
// there is no framing to desynchronize; the connection serves on. The
// answers come through the TLS listener's guarded stream, and r.TLS is set
// (the upstream sees X-Forwarded-Proto https).
func TestFramingConflictHTTP2(t *testing.T) {
	t.Parallel()
	app := startFramingApp(t, true)
	h := app.dialH2(t)
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "localhost"},
		{Name: ":path", Value: "/front"},
		{Name: "content-length", Value: "5"},
		{Name: "transfer-encoding", Value: "chunked"},
	}
	if got := h.request(1, fields, "0\r\n\r\n"); got != http.StatusBadRequest {
		t.Errorf("CL+TE over HTTP/2: status %d; want 400", got)
	}
	if got := h.request(3, h2Fields(t, "/after", 1000), ""); got != http.StatusOK {
		t.Errorf("next request: status %d; want 200", got)
	}
	if got := app.seen(); fmt.Sprint(got) != "[/after]" {
		t.Errorf("upstream saw %q; want [/after]", got)
	}

	for _, proto := range []string{"HTTP/2.0", "HTTP/1.1"} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: app.roots, ServerName: "localhost"}, ForceAttemptHTTP2: proto == "HTTP/2.0"}
		res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + app.addr + "/proto")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		tr.CloseIdleConnections()
		if res.Proto != proto || string(b) != "upstream /proto https" {
			t.Errorf("%s %q; want %s and X-Forwarded-Proto https", res.Proto, b, proto)
		}
	}
}

// TestTLSListenerPlainHTTP: a client speaking plain HTTP to the TLS
// listener gets net/http's 400, as before.
func TestTLSListenerPlainHTTP(t *testing.T) {
	t.Parallel()
	app := startFramingApp(t, true)
	c, err := net.Dial("tcp", app.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("status %d; want 400", res.StatusCode)
	}
}
