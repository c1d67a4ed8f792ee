package clientaddr_test

import (
	"fmt"
	"net/netip"

	"github.com/idemgate/idemgate/internal/clientaddr"
)

func ExampleResolve() {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	peer := netip.MustParseAddr("10.0.0.1") // the load balancer
	// The client wrote the first line and the "1.2.3.4" entry itself.
	xff := []string{"6.6.6.6", "1.2.3.4, 198.51.100.7, 10.0.0.9"}
	fmt.Println(clientaddr.Resolve(peer, xff, trusted))
	fmt.Println(clientaddr.Resolve(netip.MustParseAddr("203.0.113.5"), xff, trusted))
	// Output:
	// 198.51.100.7
	// 203.0.113.5
}
