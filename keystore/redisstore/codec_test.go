package redisstore

import (
	"bytes"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemgate/idemgate/keystore"
)

func TestAnswerRoundTrip(t *testing.T) {
	t.Parallel()
	body := make([]byte, 300)
	for i := range body {
		body[i] = byte(i)
	}
	for _, tc := range []struct {
		name string
		resp *keystore.Response
	}{
		{"zero", &keystore.Response{}},
		{"nil header and body", &keystore.Response{Status: 204}},
		{"empty header and body", &keystore.Response{Status: 200, Header: http.Header{}, Body: []byte{}}},
		{"too large", &keystore.Response{Status: 200, TooLarge: true}},
		{"full", &keystore.Response{
			Status: 201,
			Header: http.Header{"Set-Cookie": {"b=2", "a=1"}, "X-Empty": {""}, "X-None": {}, "Content-Type": {"application/json"}},
			Body:   body,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := decodeAnswer(encodeAnswer(tc.resp))
			if err != nil {
				t.Fatalf("decode = %v", err)
			}
			if !reflect.DeepEqual(got, tc.resp) {
				t.Errorf("round trip = %#v; want %#v", got, tc.resp)
			}
		})
	}
	if got, err := decodeAnswer(encodeAnswer(nil)); err != nil || !reflect.DeepEqual(got, &keystore.Response{}) {
		t.Errorf("round trip of nil = %#v, %v; want the zero Response", got, err)
	}
}

func TestAnswerMalformed(t *testing.T) {
	t.Parallel()
	good := encodeAnswer(&keystore.Response{Status: 200, Header: http.Header{"A": {"b"}}, Body: []byte("x")})
	for _, b := range [][]byte{
		nil,
		{},
		{2, 0, 0, 0},                         // unknown version
		{1, 0x80, 0, 0},                      // unknown flag
		{1, 0, 0x90, 0x1f, 0},                // status 1000
		{1, 0, 2, 5},                         // header count beyond the input
		{1, 0, 2, 1, 1, 'A', 0},              // header without flagHeader
		{1, 0, 2, 0, 'x'},                    // body without flagBody
		good[:len(good)-3],                   // truncated header value
		append([]byte{1, 2, 2, 1, 200}, 'A'), // name length beyond the input
	} {
		if r, err := decodeAnswer(b); err == nil {
			t.Errorf("decodeAnswer(%v) = %+v; want an error", b, r)
		}
	}
}

func FuzzDecodeAnswer(f *testing.F) {
	f.Add(encodeAnswer(&keystore.Response{Status: 200, Header: http.Header{"A": {"b", ""}}, Body: []byte("x")}))
	f.Add([]byte{1, 6, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeAnswer(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes (the encoding is canonical
		// up to header order, which encodeAnswer sorts).
		if again := encodeAnswer(r); !bytes.Equal(again, b) {
			if r2, err := decodeAnswer(again); err != nil || !reflect.DeepEqual(r, r2) {
				t.Fatalf("re-encoding %v changed the answer: %+v vs %+v (%v)", b, r, r2, err)
			}
		}
	})
}
