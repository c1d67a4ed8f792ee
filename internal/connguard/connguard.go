package connguard

import (
	"bytes"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
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

// A Listener wraps a plain-text listener's connections to watch their
// request heads (see the package documentation). Create it with
// [NewListener]. It is safe for concurrent use, as its connections are for
// net/http's use (one reader at a time).
type Listener struct {
	net.Listener
	maxHeaderBytes int
	tls            *tls.Config // NewTLSListener
	errorLog       *log.Logger
}

// NewListener returns inner with its connections watched. maxHeaderBytes is
// the largest request head accepted (max_header_bytes); <= 0 means no limit
// of the Listener's own.
func NewListener(inner net.Listener, maxHeaderBytes int) *Listener {
	return &Listener{Listener: inner, maxHeaderBytes: maxHeaderBytes}
}

// Accept waits for the next connection and returns it wrapped.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.tls == nil {
		return &conn{Conn: c, max: l.maxHeaderBytes}, nil
	}
	tc := &tlsConn{Conn: tls.Server(c, l.tls), errorLog: l.errorLog}
	return &conn{Conn: tc, max: l.maxHeaderBytes, tls: tc}, nil
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
	stOverflow         // head over the limit: the server gets filler
)

const lineCap = 128

// conn watches one connection. Read is called by one goroutine at a time
// (net/http's connection reader), which owns every field but the embedded
// Conn.
type conn struct {
	net.Conn
	max int
	tls *tlsConn // c.Conn, from a NewTLSListener; else nil

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

	// Bytes to hand out before reading on: the marker, then the rest of the
	// read it was inserted into; then pendErr.
	pending []byte
	pendErr error

	realInLast int // bytes of the client's in the read that overflowed (for tests)
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
	if c.pendErr != nil {
		err := c.pendErr
		c.pendErr = nil
		return 0, err
	}
	switch c.state {
	case stPass:
		return c.Conn.Read(p)
	case stOverflow:
		return filler(p), nil
	}
	n, err := c.Conn.Read(p)
	for i := 0; i < n; {
		adv, act := c.step(p[i:n])
		i += adv
		switch act {
		case actMark:
			// Insert the marker after p[:i]; the rest follows it.
			c.pending = append(append(make([]byte, 0, len(markerLine)+n-i), markerLine...), p[i:n]...)
			c.pendErr = err
			c.state = stPass
			return i, nil
		case actOverflow:
			c.state, c.realInLast = stOverflow, i
			return i + filler(p[i:]), nil
		}
	}
	return n, err
}

// filler fills p with bytes that extend a header line without ending it.
func filler(p []byte) int {
	for i := range p {
		p[i] = 'X'
	}
	return len(p)
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
			c.headLen, c.lineLen = 0, 0
			c.http10, c.upgrade, c.teChunked, c.clBad = false, false, false, false
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
	// header line of this head; the Listener then stops watching, since
	// the connection closes after this request.
	switch {
	case c.cl > 0 && c.te > 0, // RFC 9112 §6.3: close after it
		c.te > 0 && !c.http10 && (c.te > 1 || !c.teChunked), // net/http: 501 and close
		c.clBad: // net/http: 400 and close
		return actMark
	}
	return actNone
}

// headEnd decides, at a head's empty line, how its body is framed.
func (c *conn) headEnd() int {
	switch {
	case c.upgrade:
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
