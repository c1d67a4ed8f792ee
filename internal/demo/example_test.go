package demo_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/demo"
)

// Without idemgate in front, a retried checkout runs twice and the retry
// fails, although the first attempt succeeded.
func Example() {
	s := demo.New(demo.Options{
		Now: func() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) },
	})
	ts := httptest.NewServer(s)
	defer ts.Close()

	post := func(path, body string) {
		res, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			fmt.Println(err)
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		fmt.Print(res.StatusCode, " ", string(b))
	}
	post("/ucp/v1/carts", `{"items":[{"sku":"tee","qty":1}]}`)
	post("/ucp/v1/checkout-sessions/cart_1/complete", "")
	post("/ucp/v1/checkout-sessions/cart_1/complete", "") // the retry

	st := s.Stats()
	fmt.Println(st.Executions, st.ByRoute["POST /ucp/v1/checkout-sessions/{id}/complete"], st.Orders)
	// Output:
	// 201 {"id":"cart_1","items":[{"sku":"tee","qty":1}],"status":"open","created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05Z","execution":1}
	// 201 {"id":"order_1","cart_id":"cart_1","items":[{"sku":"tee","qty":1}],"status":"completed","created_at":"2026-01-02T03:04:05Z","execution":2}
	// 409 {"error":{"code":"cart_checked_out","message":"the cart was already checked out as order_1"}}
	// 3 2 1
}
