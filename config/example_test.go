package config_test

import (
	"fmt"

	"github.com/idemgate/idemgate/config"
)

func ExampleParse() {
	c, err := config.Parse([]byte(`
upstream:
  url: http://127.0.0.1:3000
idempotency:
  identity_headers: [ucp-agent]
  tenant_hosts:
    Shop.Example.com: shop-a
routes:
  - name: update_checkout
    method: PUT
    path: /ucp/v1/checkout-sessions/{id}
    idempotent: true
    session: id
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Idempotency.IdentityHeaders)
	fmt.Println(c.Idempotency.TenantFor("shop.example.com.:443"))
	fmt.Println(c.Idempotency.TenantFor("other.example"))
	fmt.Println(c.Routes[0].Session.Param, c.Upstream.Timeout)
	// Output:
	// [Ucp-Agent]
	// shop-a true
	//  false
	// id 1m0s
}

func ExampleConfig_Validate() {
	c := config.Default()
	c.Upstream.URL = "127.0.0.1:3000"
	c.Idempotency.ReuseStatus = 400
	c.Routes = []config.Route{
		{Name: "get_cart", Method: "GET", Path: "/carts/{id}", Idempotent: true, Session: &config.Session{Param: "cart"}},
	}
	fmt.Println(c.Validate())
	// Output:
	// upstream.url: "127.0.0.1:3000": want an absolute http or https URL
	// idempotency.reuse_status: 400: want 409 or 422
	// routes[0].idempotent: is true on GET, a safe method; only writes are idempotent routes
	// routes[0].session: names parameter "cart", but path "/carts/{id}" has no {cart}
}

func ExampleConfig_RouteTable() {
	c := config.Default()
	c.Routes = []config.Route{
		{Name: "get_checkout", Method: "GET", Path: "/checkout-sessions/{id}"},
		{Name: "current", Method: "GET", Path: "/checkout-sessions/current"},
	}
	table, templates, err := c.RouteTable()
	if err != nil {
		fmt.Println(err)
		return
	}
	i, _ := table.Lookup("GET", "/checkout-sessions/AB%2F1")
	id, _ := templates[i].Param("/checkout-sessions/AB%2F1", "id")
	fmt.Println(c.Routes[i].Name, id)
	i, _ = table.Lookup("GET", "/checkout-sessions/current")
	fmt.Println(c.Routes[i].Name)
	// Output:
	// get_checkout AB%2F1
	// current
}
