package budget_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/budget"
	"github.com/idemgate/idemgate/limiter"
)

// A keyed request's body is read within max_body_bytes, the budget and
// request_body_timeout, decoded for the fingerprint, and given back when
// the request is done.
func ExampleBudget_ReadBody() {
	b := budget.New(256<<20, 0) // max_buffered_bytes; per client: 25 %
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"amount":100}`))
	client := limiter.Bucket(netip.MustParseAddr("192.0.2.1"))

	body, err := b.ReadBody(client, r, &budget.ReadOptions{
		Limit:    1 << 20,                          // max_body_bytes
		Deadline: time.Now().Add(30 * time.Second), // end of headers + request_body_timeout
	})
	switch {
	case errors.Is(err, budget.ErrTooLarge): // 413 request_too_large
	case errors.Is(err, budget.ErrOverloaded): // 503 overloaded
	case errors.Is(err, budget.ErrTimeout): // 408 request_timeout
	case errors.Is(err, budget.ErrInvalid): // 400 request_body_invalid
	}
	if err != nil {
		return
	}
	defer body.Free()
	plain, _ := body.Decode(r.Header.Get("Content-Encoding"), 1<<20)
	fmt.Printf("%s, %d bytes held of %d\n", plain, b.Used(), b.Max())
	// Output: {"amount":100}, 14 bytes held of 268435456
}
