package proxy

import (
	"io"
	"net/http"

	"github.com/idemgate/idemgate/keystore"
)

// capture keeps what a keyed write's answer will be stored as: the status,
// the end-to-end headers and at most max bytes of the body. The body is
// teed as ReverseProxy reads it, so the client gets it as it streams; an
// answer over max is recorded as too large, never cut for the client and
// never stored in part.
type capture struct {
	max      int64
	status   int
	header   http.Header
	body     []byte
	tooLarge bool
	complete bool  // the body was read to its end
	err      error // the body read failed
	length   int64 // the answer's Content-Length, -1 if unknown
	read     int64 // body bytes read so far
	// done, when set, runs once when the whole answer has been read, before
	// its last bytes are passed on to the client.
	done func()
	// tee and resp live here, not in allocations of their own (issue 31).
	tee  teeBody
	resp keystore.Response
}

func newCapture(max int64, done func()) *capture { return &capture{max: max, done: done} }

// finish marks the answer complete and runs done.
func (c *capture) finish() {
	if c.complete {
		return
	}
	c.complete = true
	if c.done != nil {
		c.done()
	}
}

// start records the answer's head and wraps its body. drop names headers
// never stored.
func (c *capture) start(res *http.Response, drop map[string]bool) {
	c.status = res.StatusCode
	h := make(http.Header, len(res.Header))
	n := 0
	for _, v := range res.Header {
		n += len(v)
	}
	vals := make([]string, 0, n) // every value copied into one array
	for k, v := range res.Header {
		// Date and Content-Length are fresh on every replay; the first
		// run's trace and timing are not the answer's (tracing.go).
		if drop[k] || k == "Date" || k == "Content-Length" || k == headerTraceResponse || k == headerServerTiming {
			continue
		}
		if len(v) == 0 {
			h[k] = nil // as append([]string(nil), v...)
			continue
		}
		i := len(vals)
		vals = append(vals, v...)
		h[k] = vals[i:len(vals):len(vals)]
	}
	c.header = h
	c.length = res.ContentLength
	if res.ContentLength > c.max {
		c.tooLarge = true
	} else if res.ContentLength > 0 {
		c.body = make([]byte, 0, res.ContentLength)
	}
	c.tee = teeBody{ReadCloser: res.Body, c: c}
	res.Body = &c.tee
	if res.ContentLength == 0 {
		c.finish() // nothing to read: the answer is whole now
	}
}

type teeBody struct {
	io.ReadCloser
	c *capture
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	c := t.c
	c.read += int64(n)
	if n > 0 && !c.tooLarge {
		if int64(len(c.body)+n) > c.max {
			c.tooLarge = true
			c.body = nil
		} else {
			c.body = append(c.body, p[:n]...)
		}
	}
	switch {
	case err == io.EOF, err == nil && c.length > 0 && c.read == c.length:
		c.finish()
	case err != nil:
		c.err = err
	}
	return n, err
}

// response returns the answer to store, or nil when the body was not read
// to its end (the answer is unknown and must not be stored).
func (c *capture) response() *keystore.Response {
	if !c.complete || c.err != nil {
		return nil
	}
	if c.tooLarge {
		c.resp = keystore.Response{Status: c.status, TooLarge: true}
	} else {
		c.resp = keystore.Response{Status: c.status, Header: c.header, Body: c.body}
	}
	return &c.resp
}
