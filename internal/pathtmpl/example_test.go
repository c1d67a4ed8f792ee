package pathtmpl_test

import (
	"fmt"

	"github.com/idemgate/idemgate/internal/pathtmpl"
)

func ExampleTemplate_Param() {
	tmpl, err := pathtmpl.Parse("/ucp/v1/checkout-sessions/{id}")
	if err != nil {
		panic(err)
	}
	id, ok := tmpl.Param("/ucp/v1/checkout-sessions/Ab%2Fc", "id")
	fmt.Println(id, ok)
	fmt.Println(tmpl.Match("/ucp/v1/checkout-sessions/"))
	// Output:
	// Ab%2Fc true
	// false
}

func ExampleTable_Lookup() {
	tab, err := pathtmpl.NewTable([]pathtmpl.Entry{
		{Method: "GET", Template: pathtmpl.MustParse("/carts/{id}"), Index: 0},
		{Method: "GET", Template: pathtmpl.MustParse("/carts/current"), Index: 1},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(tab.Lookup("GET", "/carts/42"))
	fmt.Println(tab.Lookup("GET", "/carts/current"))
	fmt.Println(tab.Lookup("HEAD", "/carts/42"))
	// Output:
	// 0 true
	// 1 true
	// 0 false
}

func ExampleAmbiguous() {
	a := pathtmpl.MustParse("/a/{x}")
	b := pathtmpl.MustParse("/{y}/b")
	fmt.Println(pathtmpl.Ambiguous(a, b))
	fmt.Println(pathtmpl.Overlap(a, b))
	// Output:
	// true
	// /a/b true
}
