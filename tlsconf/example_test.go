package tlsconf_test

import (
	"fmt"

	"github.com/idemgate/idemgate/tlsconf"
)

func ExampleAllowList() {
	allow, err := tlsconf.NewAllowList([]string{"shop.example.com", ".tenants.example"})
	if err != nil {
		panic(err)
	}
	for _, name := range []string{"shop.example.com", "a.tenants.example", "a.b.tenants.example", "tenants.example", "evil.example"} {
		fmt.Println(name, allow.Allows(name))
	}
	// Output:
	// shop.example.com true
	// a.tenants.example true
	// a.b.tenants.example true
	// tenants.example false
	// evil.example false
}
