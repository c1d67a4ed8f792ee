package limiter_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/idemgate/idemgate/limiter"
)

func ExampleNewEdge() {
	edge, err := limiter.NewEdge(limiter.EdgeOptions{Rate: 100, Burst: 200})
	if err != nil {
		panic(err)
	}
	defer edge.Close()

	client := limiter.Bucket(netip.MustParseAddr("2001:db8:1:2::7"))
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	passed := 0
	for range 400 {
		if edge.Allow(client, now).OK {
			passed++
		}
	}
	d := edge.Allow(client, now)
	fmt.Println(client, passed, d.OK, d.RetryAfter)
	// Output: 2001:db8:1:2::/64 201 false 10ms
}

func ExampleNewRoute() {
	route, err := limiter.NewRoute(limiter.RouteOptions{Algorithm: limiter.Window, Requests: 2, Per: time.Minute})
	if err != nil {
		panic(err)
	}
	defer route.Close()

	client := limiter.Bucket(netip.MustParseAddr("192.0.2.1"))
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 20 * time.Second, 30 * time.Second, 45 * time.Second, 90 * time.Second} {
		d := route.Allow(client, now.Add(at))
		fmt.Printf("%v: ok=%v remaining=%d reset=%v retry-after=%v\n", at, d.OK, d.Remaining, d.Reset, d.RetryAfter)
	}
	// Output:
	// 0s: ok=true remaining=1 reset=1m0s retry-after=0s
	// 20s: ok=true remaining=0 reset=40s retry-after=0s
	// 30s: ok=false remaining=0 reset=1m0s retry-after=1m0s
	// 45s: ok=false remaining=0 reset=45s retry-after=45s
	// 1m30s: ok=true remaining=1 reset=1m0s retry-after=0s
}
