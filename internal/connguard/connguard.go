package connguard

import (
	"bytes"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"sync/atomic"
)

// Marker is the header the [Listener] adds to a request head that it wants
// closed after its answer. A client may send it too: that only closes its
// own connection. [Check] removes it.
const Marker = "Idemgate-Framing-Conflict"

// OversizeMarker is the header the [Listener] adds to a request head longer
// than its limit (see [Listener.SetMaxHeaderBytes]). A client may send it
// too: that only refuses its own request. [Oversized] removes it.
const OversizeMarker = "Idemgate-Head-Too-Large"

var (
	markerLine   = []byte(Marker + ": 1\r\n")
	oversizeLine = []byte(OversizeMarker + ": 1\r\n")
)

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

// Oversized reports whether r's head was longer than the [Listener]'s limit
// when it was read: the caller then answers 431 and nothing else (r holds
// the head up to the limit; the rest of it, and of the connection, was
// dropped). It removes the marker from r.Header and sets "Connection:
// close" on w. Call it after [Check], for every request.
func Oversized(w http.ResponseWriter, r *http.Request) bool {
	if _, ok := r.Header[OversizeMarker]; !ok {
		return false
	}
	delete(r.Header, OversizeMarker)
	w.Header().Set("Connection", "close")
	return true
}

// A Listener wraps a plain-text listener's connections to watch their
// request heads (see the package documentation). Create it with
// [NewListener]. It is safe for concurrent use, as its connections are for
// net/http's use (one reader at a time).
type Listener struct {
	net.Listener
	maxHeaderBytes atomic.Int64 // read at the start of each head
	tls            *tls.Config  // NewTLSListener
	errorLog       *log.Logger
}

// NewListener returns inner with its connections watched. maxHeaderBytes is
// the largest request head accepted (max_header_bytes); <= 0 means no limit
// of the Listener's own.
func NewListener(inner net.Listener, maxHeaderBytes int) *Listener {
	l := &Listener{Listener: inner}
	l.SetMaxHeaderBytes(maxHeaderBytes)
	return l
}

// SetMaxHeaderBytes sets the largest request head accepted, from the next
// head on, on every connection (open ones included); <= 0 means no limit of
// the Listener's own. It is safe to call at any time (a config reload).
func (l *Listener) SetMaxHeaderBytes(n int) { l.maxHeaderBytes.Store(int64(n)) }

// MaxHeaderBytes returns the limit [Listener.SetMaxHeaderBytes] set.
func (l *Listener) MaxHeaderBytes() int { return int(l.maxHeaderBytes.Load()) }

// Accept waits for the next connection and returns it wrapped.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.tls == nil {
		return &conn{Conn: c, limit: &l.maxHeaderBytes}, nil
	}
	tc := &tlsConn{Conn: tls.Server(c, l.tls), errorLog: l.errorLog}
	return &conn{Conn: tc, limit: &l.maxHeaderBytes, tls: tc}, nil
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
	stDrop             // after an oversized head: the client's bytes are discarded
)

const lineCap = 128

// conn watches one connection. Read is called by one goroutine at a time
// (net/http's connection reader), which owns every field but the embedded
// Conn.
type conn struct {
	net.Conn
	limit *atomic.Int64 // the Listener's limit; nil: max is fixed (tests)
	max   int           // the current head's limit, read from limit at its start
	tls   *tlsConn      // c.Conn, from a NewTLSListener; else nil

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
	marked    bool   // Marker was inserted into this head
	colon     bool   // the current line has a colon
	complete  []byte // what ends the line an oversized head stopped in

	// Bytes to hand out before reading on: a marker line (already
	// watched), then raw, the rest of the read it was inserted into (not
	// yet watched), then rawErr, the error of that read.
	pending []byte
	raw     []byte
	rawErr  error
}

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
	case len(c.raw) > 0:
		n = copy(p, c.raw)
		if c.raw = c.raw[n:]; len(c.raw) == 0 {
			err, c.rawErr = c.rawErr, nil
		}
	case c.rawErr != nil:
		err, c.rawErr = c.rawErr, nil
		return 0, err
	case c.state == stDrop:
		// The server answers the oversized head and closes; until then
		// whatever the client still sends (the rest of its head) is
		// read and dropped, so that the answer is not lost to a reset.
		for {
			if _, err := c.Conn.Read(p); err != nil {
				return 0, err
			}
		}
	default:
		n, err = c.Conn.Read(p)
	}
	if c.state == stPass {
		return n, err
	}
	for i := 0; i < n; {
		adv, act := c.step(p[i:n])
		i += adv
		if act == actNone {
			continue
		}
		// Insert the marker lines after p[:i] (the line that decided
		// them); the rest of the read follows them, watched then; after
		// an oversized head's end, nothing follows.
		c.pending = c.pending[:0]
		if act&actMark != 0 {
			c.pending = append(c.pending, markerLine...)
		}
		if act&actOversize != 0 {
			c.pending = append(append(append(c.pending, c.complete...), oversizeLine...), "\r\n"...)
		}
		switch {
		case c.state == stDrop:
			c.raw = nil
		case i < n:
			c.raw = append(append([]byte(nil), p[i:n]...), c.raw...)
		}
		if err != nil {
			c.rawErr = err
		}
		if i == 0 {
			return c.Read(p)
		}
		return i, nil
	}
	return n, err
}

// Actions after a line, a bit set.
const (
	actNone     = 0
	actMark     = 1 << iota // insert Marker
	actOversize             // complete the line, insert OversizeMarker, end the head
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
			c.headLen, c.lineLen = 0, 0
			c.http10, c.upgrade, c.teChunked, c.clBad, c.marked = false, false, false, false, false
			c.cl, c.te, c.clVal = 0, 0, 0
			if c.limit != nil {
				c.max = int(c.limit.Load())
			}
		}
		return i, actNone
	case stHead:
		for i, ch := range b {
			c.headLen++
			if ch != '\n' {
				// The head is at least this byte, its line's LF and a
				// final CRLF (a CR that starts a line may be that CRLF,
				// which fits: see below): over the limit, it ends here.
				// (A head whose lines end in a bare LF is up to two bytes
				// shorter than the count assumes.)
				if c.max > 0 && c.headLen+3 > c.max && (ch != '\r' || c.lineLen > 0) {
					c.oversize()
					return i, actOversize
				}
				c.addByte(ch)
				continue
			}
			act := c.headLine()
			if c.state != stHead {
				return i + 1, act // the head ended
			}
			// After this line the head is at least a final CRLF longer.
			if c.max > 0 && c.headLen+2 > c.max {
				c.lineLen = 0
				c.oversize()
				act |= actOversize
			}
			if act != actNone {
				return i + 1, act
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

// oversize ends a head that passed the limit: the bytes that complete its
// current line go into c.complete (so that the server reads a well-formed
// head of what came so far, then the marker and the head's end), and the
// rest of the connection is dropped. A request line gets a version; a
// header line ":" and its end (an empty value for a name cut short; for a
// value, one more character it may hold).
func (c *conn) oversize() {
	switch {
	case c.lineLen == 0:
		c.complete = c.complete[:0]
	case c.first:
		c.complete = append(c.complete[:0], " HTTP/1.1\r\n"...)
	default:
		c.complete = append(c.complete[:0], ":\r\n"...)
	}
	c.state = stDrop
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
	// header line of this head; the Listener watches the rest of the head
	// (its size) and then stops, since the connection closes after this
	// request.
	if c.marked {
		return actNone
	}
	switch {
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
	switch {
	case c.marked, c.upgrade:
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
