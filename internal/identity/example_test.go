package identity_test

import (
	"fmt"
	"net/http"

	"github.com/idemgate/idemgate/internal/identity"
)

// A cookie identity: Alice and Bob send the same key, but their scopes
// differ, and a request without the cookie has an empty identity.
func Example() {
	r, err := identity.New(identity.Options{Cookies: []string{"sid"}})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	resolve := func(cookie string) identity.Result {
		req, _ := http.NewRequest(http.MethodPost, "http://shop.example/orders", nil)
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		return r.Resolve(req)
	}
	alice, bob, nobody := resolve("sid=alice"), resolve("sid=bob"), resolve("")
	fmt.Println(alice.Status, bob.Status, nobody.Status)
	fmt.Println(identity.ScopeKey("shop", alice, "order-123") == identity.ScopeKey("shop", bob, "order-123"))
	// Output:
	// present present empty
	// false
}

// Route limits by identity count verified JWT identities only; anything
// else counts per client address.
func ExampleParseBy() {
	for _, s := range []string{"", "identity", "header:x-api-key", "ip"} {
		by, err := identity.ParseBy(s)
		fmt.Println(by, by.IsIdentity(), err != nil)
	}
	// Output:
	// client_ip false false
	// identity true false
	// header:X-Api-Key false false
	// client_ip false true
}
