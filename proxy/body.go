package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
)

// readBody reads a keyed request's body whole, within max_body_bytes and
// the max_buffered_bytes budget, and puts it back for the upstream. The
// caller calls free when the request is done.
//
// observe is observe mode's policy: the body is never cut. A body enforce
// mode refuses is then left for the upstream whole: a declared length over
// the limit is not read at all, and what was read of a body that turned out
// too long, or failed, is put back in front of the rest (or of the same
// failure), as the upstream would have seen it without idemgate.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request, observe bool) (body []byte, free func(), prob *proxyProblem) {
	limit := p.opts.Idempotency.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, nil, &problemRequestTooLarge
	}
	hold := limit
	if r.ContentLength >= 0 {
		hold = r.ContentLength
	}
	if p.buffered.Add(hold) > p.opts.MaxBufferedBytes {
		p.buffered.Add(-hold)
		return nil, nil, &problemOverloaded
	}
	free = func() { p.buffered.Add(-hold) }
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil, free, nil
	}
	var src io.Reader = http.MaxBytesReader(w, r.Body, limit)
	if observe {
		src = io.LimitReader(r.Body, limit+1) // never a refusal on the wire
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 512)))
	_, err := buf.ReadFrom(src)
	if err != nil || int64(buf.Len()) > limit {
		free()
		if observe {
			rest := r.Body
			if err != nil {
				rest = &failedBody{err: err, Closer: r.Body}
			}
			r.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(buf.Bytes()), rest), Closer: r.Body}
		}
		var mbe *http.MaxBytesError
		if err == nil || errors.As(err, &mbe) {
			return nil, nil, &problemRequestTooLarge
		}
		// The client went away or sent a broken body: nothing was claimed.
		return nil, nil, &problemBodyInvalid
	}
	body = buf.Bytes()
	rb := &bufferedBody{}
	rb.Reset(body)
	r.Body = rb
	r.ContentLength = int64(len(body))
	r.GetBody = nil
	return body, free, nil
}

// bufferedBody is a read body held in memory: one allocation where
// io.NopCloser(bytes.NewReader(b)) takes two. It has no GetBody, so the
// Transport can never resend it.
type bufferedBody struct{ bytes.Reader }

func (*bufferedBody) Close() error { return nil }

// prefixedBody is a request body whose start was read already.
type prefixedBody struct {
	io.Reader
	io.Closer
}

// failedBody replays a body's read error.
type failedBody struct {
	err error
	io.Closer
}

func (f *failedBody) Read([]byte) (int, error) { return 0, f.err }
