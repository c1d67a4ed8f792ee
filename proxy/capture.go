package proxy

import (
	"io"
	"net/http"

	"github.com/idemgate/idemgate/keystore"
)

// capture keeps what a keyed write's answer will be stored as: the status,
// the end-to-end headers and at most max bytes of the body. The body is
// teed as ReverseProxy reads it (see [answerBody]), so the client gets it
// as it streams; an answer over max is recorded as too large, never cut
// for the client and never stored in part. It reports the moment the
// answer is whole; what then happens is the keyed write's (keyedwrite.go).
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
	resp     keystore.Response
}

// start records the answer's head and reports whether the answer is whole
// already (it has no body). drop names headers never stored.
func (c *capture) start(res *http.Response, drop map[string]bool) (whole bool) {
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
	return res.ContentLength == 0 && c.whole()
}

// tee keeps p, what one read of the answer's body returned with err, and
// reports whether the answer became whole with it.
func (c *capture) tee(p []byte, err error) (whole bool) {
	n := len(p)
	c.read += int64(n)
	if n > 0 && !c.tooLarge {
		if int64(len(c.body)+n) > c.max {
			c.tooLarge = true
			c.body = nil
		} else {
			c.body = append(c.body, p...)
		}
	}
	switch {
	case err == io.EOF, err == nil && c.length > 0 && c.read == c.length:
		return c.whole()
	case err != nil:
		c.err = err
	}
	return false
}

// whole marks the answer complete and reports whether it was not before.
func (c *capture) whole() bool {
	if c.complete {
		return false
	}
	c.complete = true
	return true
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
