package problem

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// RequestIDHeader carries a request's ID, from the client and back to it.
const RequestIDHeader = "X-Request-Id"

// maxRequestIDLen is the longest client request ID [RequestID] keeps.
const maxRequestIDLen = 200

// RequestID returns the client's X-Request-Id value v when it is 1–200
// visible ASCII characters ('!' to '~'), else a new process-unique one
// (DESIGN.md, Hardening). The value kept may hold quotes, backslashes and
// angle brackets: every body that carries it escapes it (problem+json by
// quoting, errors templates for their content type).
func RequestID(v string) string {
	if len(v) > 0 && len(v) <= maxRequestIDLen {
		ok := true
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < '!' || c > '~' {
				ok = false
				break
			}
		}
		if ok {
			return v
		}
	}
	return newRequestID()
}

var (
	idPrefix = func() string {
		var b [6]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
	idSeq atomic.Uint64
)

// newRequestID returns a process-unique ID: a random per-process prefix and
// a counter, cheaper than reading crypto/rand per request.
func newRequestID() string {
	b := make([]byte, 0, 32)
	b = append(b, idPrefix...)
	b = append(b, '-')
	b = strconv.AppendUint(b, idSeq.Add(1), 36)
	return string(b)
}
