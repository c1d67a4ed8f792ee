package canonjson_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/canonjson"
)

// body1K is a realistic ~1 KiB keyed write: a checkout, pretty-printed, keys
// unsorted, a few escapes.
var body1K = []byte(`{
  "order_id": "ord_01HZX3Q4V7K2N8M5P6R9T0W1Y2",
  "currency": "EUR",
  "customer": {
    "name": "Zo\u00e9 M\u00fcller",
    "email": "zoe.mueller@example.com",
    "address": {"street": "Hauptstra\u00dfe 12", "city": "Berlin", "postal_code": "10115", "country": "DE"}
  },
  "items": [
    {"sku": "SKU-1001", "name": "Espresso beans 1kg", "quantity": 2, "unit_price": 24.90, "added_at": "2024-05-01T10:00:00Z"},
    {"sku": "SKU-2002", "name": "Milk frother", "quantity": 1, "unit_price": 39.00, "added_at": "2024-05-01T10:02:13Z"},
    {"sku": "SKU-3003", "name": "Cup \"Barista\" 6-pack", "quantity": 1, "unit_price": 18.5, "added_at": "2024-05-01T10:05:42Z"}
  ],
  "shipping": {"method": "express", "price": 7.95, "notes": "Leave at the door\/reception.\nRing twice."},
  "payment": {"method": "card", "token": "tok_4f9a2b7c1d8e3f60", "three_ds": true, "installments": null},
  "discounts": [{"code": "SPRING10", "amount": 8.79}],
  "total": 106.46,
  "meta": {"sent_at": "2024-05-01T10:06:00.123Z", "client": "ucp-agent/1.4.2", "retries": 0, "trace": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
}`)

// body64K is a realistic ~64 KiB keyed write: a bulk order of many items.
var body64K = func() []byte {
	var b strings.Builder
	b.WriteString(`{"order_id":"ord_bulk_7731","currency":"EUR","meta":{"sent_at":"2024-05-01T10:06:00Z","client":"erp-sync/2.0"},"items":[`)
	for i := 0; b.Len() < 64<<10-300; i++ {
		if i > 0 {
			b.WriteString(",\n  ")
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%05d","name":"Article n\u00b0%d \u2013 size %d","quantity":%d,"unit_price":%d.%02d,"tags":["bulk","w%d"],"attrs":{"weight_g":%d,"fragile":%t,"origin":"DE"}}`,
			i, i, i%7, i%9+1, i%300, i%100, i%52, 100+i*13%900, i%5 == 0)
	}
	b.WriteString(`],"total":123456.78,"notes":"bulk \/ nightly"}`)
	return []byte(b.String())
}()

var benchBodies = []struct {
	name string
	body []byte
}{
	{"1KiB", body1K},
	{"64KiB", body64K},
}

func BenchmarkAppend(b *testing.B) {
	ignore := []canonjson.Pointer{mustPointer(b, "/meta/sent_at")}
	for _, bb := range benchBodies {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			var out []byte
			for b.Loop() {
				var ok bool
				if out, ok = canonjson.Append(out[:0], bb.body, ignore); !ok {
					b.Fatal("Append ok = false; want true")
				}
			}
		})
	}
}

// BenchmarkAppendParallel is the proxy's hot path: many requests at once,
// each hashing into a fresh dst, sharing the buffer pool.
func BenchmarkAppendParallel(b *testing.B) {
	ignore := []canonjson.Pointer{mustPointer(b, "/meta/sent_at")}
	for _, bb := range benchBodies {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			b.RunParallel(func(pb *testing.PB) {
				var out []byte
				for pb.Next() {
					out, _ = canonjson.Append(out[:0], bb.body, ignore)
				}
			})
		})
	}
}

// BenchmarkEncodingJSON is a reference point: decoding into any and
// re-encoding with encoding/json (which sorts map keys but neither keeps
// duplicates out nor removes pointers).
func BenchmarkEncodingJSON(b *testing.B) {
	for _, bb := range benchBodies {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bb.body)))
			for b.Loop() {
				var v any
				if err := json.Unmarshal(bb.body, &v); err != nil {
					b.Fatal(err)
				}
				if _, err := json.Marshal(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func mustPointer(tb testing.TB, s string) canonjson.Pointer {
	tb.Helper()
	p, err := canonjson.ParsePointer(s)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
