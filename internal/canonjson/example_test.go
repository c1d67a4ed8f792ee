package canonjson_test

import (
	"crypto/sha256"
	"fmt"

	"github.com/idemgate/idemgate/internal/canonjson"
)

func ExampleAppend() {
	sentAt, err := canonjson.ParsePointer("/meta/sent_at")
	if err != nil {
		panic(err)
	}
	ignore := []canonjson.Pointer{sentAt}

	first := []byte(`{"amount": 1.0, "note": "caf\u00e9 \/ bar", "meta": {"sent_at": "10:00:00"}}`)
	retry := []byte(`{"meta":{"sent_at":"10:00:05"},"note":"café / bar","amount":1.0}`)

	a, _ := canonjson.Append(nil, first, ignore)
	b, _ := canonjson.Append(nil, retry, ignore)
	fmt.Println(string(a))
	fmt.Println(string(a) == string(b))
	// Output:
	// {"amount":1.0,"meta":{},"note":"café / bar"}
	// true
}

// When a body is not canonicalizable, hash its raw bytes.
func ExampleAppend_fallback() {
	body := []byte(`{"id": 1, "id": 2}`) // duplicate key
	buf, ok := canonjson.Append(nil, body, nil)
	if !ok {
		buf = body
	}
	sum := sha256.Sum256(buf)
	fmt.Println(ok, string(buf), len(sum))
	// Output:
	// false {"id": 1, "id": 2} 32
}

func ExampleParsePointer() {
	p, err := canonjson.ParsePointer("/items/0/ts")
	fmt.Println(p, err)
	_, err = canonjson.ParsePointer("meta")
	fmt.Println(err)
	// Output:
	// /items/0/ts <nil>
	// canonjson: invalid JSON pointer "meta": must start with "/"
}
