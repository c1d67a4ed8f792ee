package connguard

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Marker is the header the [Listener] adds to a request head that it wants
// closed after its answer. A client may send it too: that only closes its
// own connection. [Check] removes it.
const Marker = "Idemgate-Framing-Conflict"

var markerLine = []byte(Marker + ": 1\r\n")

// Check reports whether r must be answered with "Connection: close" because
// its head was marked by the [Listener]; it then sets that header on w.
// Either way it removes the marker from r.Header, so it never reaches the
// upstream, and it sets r.TLS for a request that came through a
// [NewTLSListener]. Call it first thing in the outermost handler, for every
// request. On a plain listener it allocates nothing.
func Check(w http.ResponseWriter, r *http.Request) bool {
	setTLS(r)
	if _, ok := r.Header[Marker]; !ok {
		return false
	}
	delete(r.Header, Marker)
	w.Header().Set("Connection", "close")
	return true
}

// A Limit is the largest request head accepted (max_header_bytes), shared
// by the Listeners of a process and changed by a config reload. Each head
// reads it as it starts, so a head in progress keeps the limit it started
// with and the next one has the new limit; over HTTP/2, each connection
// reads it as it starts (see [ServeTLS]). A value <= 0 means no limit of
// the Listener's own. It is safe for concurrent use.
type Limit struct {
	n atomic.Int64

	mu       sync.Mutex // serializes Set; protects onChange
	onChange []func()
}

// NewLimit returns a Limit of n bytes.
func NewLimit(n int) *Limit {
	l := new(Limit)
	l.n.Store(int64(n))
	return l
}

// Set changes the limit for the heads and HTTP/2 connections that start
// after it.
func (l *Limit) Set(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n.Swap(int64(n)) == int64(n) {
		return
	}
	for _, f := range l.onChange {
		f()
	}
}

// Load returns the limit.
func (l *Limit) Load() int {
	if l == nil {
		return 0
	}
	return int(l.n.Load())
}

// notify has f called after each change of the limit.
func (l *Limit) notify(f func()) {
	l.mu.Lock()
	l.onChange = append(l.onChange, f)
	l.mu.Unlock()
}

// A Listener wraps a plain-text listener's connections to watch their
// request heads (see the package documentation). Create it with
// [NewListener]. It is safe for concurrent use, as its connections are for
// net/http's use (one reader at a time).
type Listener struct {
	net.Listener
	limit    *Limit
	tls      *tls.Config // NewTLSListener
	errorLog *log.Logger
}

// NewListener returns inner with its connections watched under limit
// (nil: no limit of the Listener's own). The server that serves it must
// accept heads of any size the limit may take: an http.Server's
// MaxHeaderBytes at least the largest value limit is ever set to (see
// the package documentation).
func NewListener(inner net.Listener, limit *Limit) *Listener {
	return &Listener{Listener: inner, limit: limit}
}

// Accept waits for the next connection and returns it wrapped.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.tls == nil {
		return &conn{Conn: c, limit: l.limit}, nil
	}
	tc := &tlsConn{Conn: tls.Server(c, l.tls), errorLog: l.errorLog}
	return &conn{Conn: tc, limit: l.limit, tls: tc}, nil
}

// Parser states.
const (
	stStart     = iota // before a head: skipping CR and LF
	stHead             // in a head
	stBody             // in a Content-Length body: remain bytes left
	stChunkLine        // in a chunk-size line
	stChunkData        // in chunk data: remain bytes left
	stChunkCRLF        // after chunk data: remain (2) bytes of CRLF left
	stTrailer          // in the trailer section, until an empty line
	stPass             // no longer watched
	stOverflow         // head over the limit: the server reads its end
)

const lineCap = 128

// conn watches one connection. Read is called by one goroutine at a time
// (net/http's connection reader), which owns every field but the embedded
// Conn and the atomic ones, which Write and Close share.
type conn struct {
	net.Conn
	max   int      // the current head's limit, read from limit as it started
	tls   *tlsConn // c.Conn, from a NewTLSListener; else nil
	limit *Limit

	state  int
	remain int64 // stBody, stChunkData, stChunkCRLF
	// The current line: its first lineCap bytes, its length, its last 8.
	line    [lineCap]byte
	lineLen int
	tail    [9]byte
	// The current head.
	headLen   int
	first     bool // the next line is the request line
	http10    bool
	cl, te    int // Content-Length and Transfer-Encoding lines seen
	clVal     int64
	clBad     bool // a Content-Length not a plain decimal, or two that differ
	teChunked bool // the last Transfer-Encoding line was exactly "chunked"
	upgrade   bool
	marked    bool // the marker was inserted into this head

	// Bytes to hand out before reading on: the marker. Then held, the
	// client's bytes read with the marker's and not yet watched, and
	// heldErr, the error of the read they came with.
	pending []byte
	held    []byte
	heldErr error

	// Shared with Write and Close.
	upgradeHead atomic.Bool // a head asked for an Upgrade: watch the answers for a 101
	upgraded    atomic.Bool // the server switched protocols: no longer watched
	overflow    atomic.Int32

	realInLast int // bytes of the client's in the read that overflowed (for tests)
}

// The overflow states: none; a head went over the limit and the 431 is
// due; the 431 was written.
const (
	overNone = iota
	overDue
	overAnswered
)

// answer431 is the answer to a head over the limit: byte for byte the one
// net/http writes when its own MaxHeaderBytes trips.
const answer431 = "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large"

// lingerAfter431 is how long a connection answered 431 stays open, its
// writing side closed, before it is closed: net/http's own delay after
// its 431 (rstAvoidanceDelay), so that the client reads the answer before
// a reset (the client may still be sending its head) discards it.
const lingerAfter431 = 500 * time.Millisecond

// CloseWrite half-closes the connection when it can, so net/http's 431 and
// other early answers reach the client before the connection is reset.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

func (c *conn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	var n int
	var err error
	switch {
	case c.state == stOverflow:
		return 0, io.EOF
	case len(c.held) > 0:
		n = copy(p, c.held)
		if c.held = c.held[n:]; len(c.held) == 0 {
			err, c.heldErr = c.heldErr, nil
		}
	case c.heldErr != nil:
		err, c.heldErr = c.heldErr, nil
		return 0, err
	case c.state == stPass:
		return c.Conn.Read(p)
	default:
		n, err = c.Conn.Read(p)
	}
	if c.upgraded.Load() {
		// Read after the server's 101: the client's bytes are another
		// protocol's.
		c.state = stPass
		return n, err
	}
	for i := 0; i < n; {
		adv, act := c.step(p[i:n])
		i += adv
		switch act {
		case actMark:
			// Insert the marker after p[:i]; the rest of the read follows
			// it, still watched.
			if i < n {
				c.held = append(append(make([]byte, 0, n-i+len(c.held)), p[i:n]...), c.held...)
			}
			c.heldErr = err
			c.pending = markerLine
			return i, nil
		case actOverflow:
			// The server gets the head up to the limit, then the end of
			// the stream: its answer to the cut head (400, or none) is
			// replaced by the 431 (Write, Close).
			c.state, c.realInLast = stOverflow, i
			c.overflow.Store(overDue)
			if i == 0 {
				return 0, io.EOF
			}
			return i, nil
		}
	}
	return n, err
}

// Write watches the server's answers for two things: after a head over the
// limit, the server's answer to the cut head is replaced by the 431 (and
// whatever follows it is dropped); after an Upgrade request, a 101 means
// the connection now speaks another protocol and is no longer watched
// (set before the 101 is written, so the client's first bytes of the new
// protocol are read after it).
func (c *conn) Write(p []byte) (int, error) {
	if c.overflow.Load() != overNone {
		if c.overflow.CompareAndSwap(overDue, overAnswered) {
			io.WriteString(c.Conn, answer431)
		}
		return len(p), nil
	}
	if c.upgradeHead.Load() && (bytes.HasPrefix(p, []byte("HTTP/1.1 101 ")) || bytes.HasPrefix(p, []byte("HTTP/1.0 101 "))) {
		c.upgraded.Store(true)
	}
	return c.Conn.Write(p)
}

// Close closes the connection; one whose head went over the limit gets
// the 431 first (if the server wrote no answer), its writing side closed,
// and stays open lingerAfter431 more, as net/http does after its own 431,
// without holding the server's goroutine.
func (c *conn) Close() error {
	if c.overflow.Load() == overNone {
		return c.Conn.Close()
	}
	if c.overflow.CompareAndSwap(overDue, overAnswered) {
		io.WriteString(c.Conn, answer431)
	}
	c.CloseWrite()
	time.AfterFunc(lingerAfter431, func() { c.Conn.Close() })
	return nil
}

const (
	actNone = iota
	actMark
	actOverflow
)

// step consumes a prefix of b and returns its length and what to do after
// it.
func (c *conn) step(b []byte) (int, int) {
	switch c.state {
	case stStart:
		i := 0
		for i < len(b) && (b[i] == '\r' || b[i] == '\n') {
			i++
		}
		if i < len(b) {
			c.state, c.first = stHead, true
			c.max = c.limit.Load()
			c.headLen, c.lineLen = 0, 0
			c.http10, c.upgrade, c.teChunked, c.clBad, c.marked = false, false, false, false, false
			c.cl, c.te, c.clVal = 0, 0, 0
		}
		return i, actNone
	case stHead:
		for i, ch := range b {
			c.headLen++
			if c.max > 0 && c.headLen > c.max {
				return i, actOverflow
			}
			if ch != '\n' {
				c.addByte(ch)
				continue
			}
			if act := c.headLine(); act != actNone {
				return i + 1, act
			}
			if c.state != stHead {
				return i + 1, actNone
			}
		}
		return len(b), actNone
	case stBody, stChunkData:
		n := int(min(int64(len(b)), c.remain))
		c.remain -= int64(n)
		if c.remain == 0 {
			if c.state == stBody {
				c.state = stStart
			} else {
				c.state, c.remain = stChunkCRLF, 2
			}
		}
		return n, actNone
	case stChunkCRLF:
		want := "\r\n"[2-c.remain]
		if b[0] != want {
			c.state = stPass // net/http refuses it and closes
			return 1, actNone
		}
		if c.remain--; c.remain == 0 {
			c.state, c.lineLen = stChunkLine, 0
		}
		return 1, actNone
	case stChunkLine, stTrailer:
		for i, ch := range b {
			if ch != '\n' {
				c.addByte(ch)
				continue
			}
			c.bodyLine()
			return i + 1, actNone
		}
		return len(b), actNone
	}
	return len(b), actNone
}

func (c *conn) addByte(ch byte) {
	if c.lineLen < lineCap {
		c.line[c.lineLen] = ch
	}
	c.lineLen++
	if c.first { // only the request line's end (its version) is needed
		copy(c.tail[:], c.tail[1:])
		c.tail[8] = ch
	}
}

// lineBytes returns the current line without its CR, and whether it was
// kept whole.
func (c *conn) lineBytes() ([]byte, bool) {
	n := c.lineLen
	whole := n <= lineCap
	l := c.line[:min(n, lineCap)]
	if whole && len(l) > 0 && l[len(l)-1] == '\r' {
		l = l[:len(l)-1]
	}
	c.lineLen = 0
	return l, whole
}

// headLine handles a complete line of a head.
func (c *conn) headLine() int {
	tail := c.tail
	long := c.lineLen > lineCap
	l, _ := c.lineBytes()
	if c.first {
		c.first = false
		if bytes.HasPrefix(l, []byte("PRI * HTTP/2.0")) {
			c.state = stPass
			return actNone
		}
		v := tail[1:]
		if tail[8] == '\r' {
			v = tail[:8]
		}
		c.http10 = string(v) == "HTTP/1.0"
		return actNone
	}
	if len(l) == 0 {
		return c.headEnd()
	}
	colon := bytes.IndexByte(l, ':')
	if colon < 0 {
		return actNone // a folded line or garbage: net/http decides
	}
	name, val := l[:colon], bytes.Trim(l[colon+1:], " \t")
	switch {
	case bytes.EqualFold(name, []byte("Content-Length")):
		c.cl++
		v, ok := parseDecimal(val)
		if !ok || long || (c.cl > 1 && v != c.clVal) {
			c.clBad = true
		}
		c.clVal = v
	case bytes.EqualFold(name, []byte("Transfer-Encoding")):
		c.te++
		c.teChunked = !long && bytes.EqualFold(val, []byte("chunked"))
	case bytes.EqualFold(name, []byte("Upgrade")):
		c.upgrade = true
	default:
		return actNone
	}
	// Marked right after the line that decides it, so the marker is a
	// header line of this head; the rest of the head is still counted, and
	// the Listener stops watching at its end, since the connection closes
	// after this request.
	switch {
	case c.marked:
	case c.cl > 0 && c.te > 0, // RFC 9112 §6.3: close after it
		c.te > 0 && !c.http10 && (c.te > 1 || !c.teChunked), // net/http: 501 and close
		c.clBad: // net/http: 400 and close
		c.marked = true
		return actMark
	}
	return actNone
}

// headEnd decides, at a head's empty line, how its body is framed.
func (c *conn) headEnd() int {
	if c.upgrade {
		// Watched on as HTTP/1 until the server answers 101 (Write).
		c.upgradeHead.Store(true)
	}
	switch {
	case c.marked:
		c.state = stPass
	case c.te > 0 && !c.http10:
		c.state, c.lineLen = stChunkLine, 0
	case c.cl > 0 && c.clVal > 0:
		c.state, c.remain = stBody, c.clVal
	default:
		c.state = stStart
	}
	return actNone
}

// bodyLine handles a complete chunk-size or trailer line.
func (c *conn) bodyLine() {
	l, whole := c.lineBytes()
	if c.state == stTrailer {
		if len(l) == 0 && whole {
			c.state = stStart
		}
		return
	}
	l = bytes.TrimRight(l, " \t")
	if i := bytes.IndexByte(l, ';'); i >= 0 {
		l = bytes.TrimRight(l[:i], " \t")
	}
	n, ok := parseHex(l)
	switch {
	case !ok || !whole:
		c.state = stPass
	case n == 0:
		c.state = stTrailer
	default:
		c.state, c.remain = stChunkData, n
	}
}

func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int64(ch-'0')
	}
	return n, true
}

func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, ch := range b {
		var d byte
		switch {
		case '0' <= ch && ch <= '9':
			d = ch - '0'
		case 'a' <= ch && ch <= 'f':
			d = ch - 'a' + 10
		case 'A' <= ch && ch <= 'F':
			d = ch - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}
