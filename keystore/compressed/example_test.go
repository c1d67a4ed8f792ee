package compressed_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/compressed"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// A JSON answer is stored compressed, and read back as it was.
func Example() {
	m := memstore.New(memstore.Options{})
	defer m.Close()
	s, err := compressed.New(m, compressed.Options{Compress: true})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	k := keystore.NewKey("order-7")
	body := []byte(`{"object":"list","data":[` + strings.Repeat(`{"id":"ch_1","object":"charge","amount":4900,"currency":"usd"},`, 20) + `{}]}`)
	res, _ := s.Reserve(ctx, k, keystore.ReserveOptions{Lease: time.Minute, Retention: time.Hour})
	_ = s.Complete(ctx, k, res.Token, &keystore.Response{Status: 200, Body: body})

	held, _ := m.Get(ctx, k) // what the memory store holds
	read, _ := s.Get(ctx, k)
	fmt.Println(held.Response.Compressed, len(held.Response.Body) < len(body)/4)
	fmt.Println(string(read.Response.Body) == string(body))
	// Output:
	// true true
	// true
}
