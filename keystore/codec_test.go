package keystore

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"testing"
)

func TestAnswerRoundTrip(t *testing.T) {
	t.Parallel()
	body := make([]byte, 300)
	for i := range body {
		body[i] = byte(i)
	}
	for _, tc := range []struct {
		name string
		resp *Response
	}{
		{"zero", &Response{}},
		{"nil header and body", &Response{Status: 204}},
		{"empty header and body", &Response{Status: 200, Header: http.Header{}, Body: []byte{}}},
		{"too large", &Response{Status: 200, TooLarge: true}},
		{"compressed", &Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte{0x28, 0xb5, 0x2f, 0xfd}, Compressed: true}},
		{"full", &Response{
			Status: 201,
			Header: http.Header{"Set-Cookie": {"b=2", "a=1"}, "X-Empty": {""}, "X-None": {}, "Content-Type": {"application/json"}},
			Body:   body,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := DecodeResponse(EncodeResponse(tc.resp))
			if err != nil {
				t.Fatalf("decode = %v", err)
			}
			if !reflect.DeepEqual(got, tc.resp) {
				t.Errorf("round trip = %#v; want %#v", got, tc.resp)
			}
		})
	}
	if got, err := DecodeResponse(EncodeResponse(nil)); err != nil || !reflect.DeepEqual(got, &Response{}) {
		t.Errorf("round trip of nil = %#v, %v; want the zero Response", got, err)
	}
}

func TestAnswerMalformed(t *testing.T) {
	t.Parallel()
	good := EncodeResponse(&Response{Status: 200, Header: http.Header{"A": {"b"}}, Body: []byte("x")})
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
		if r, err := DecodeResponse(b); err == nil {
			t.Errorf("DecodeResponse(%v) = %+v; want an error", b, r)
		}
	}
}

// A compressed answer is one the releases before compression cannot read:
// their DecodeResponse (the first release's, commit 768a101, and every one
// since until this flag) refused any flag outside tooLarge|header|body, so
// they fail closed on it (503) and never replay the compressed bytes.
func TestCompressedIsMalformedToOlderReleases(t *testing.T) {
	t.Parallel()
	const olderFlags = 1<<0 | 1<<1 | 1<<2 // the only flags older decoders accept
	b := EncodeResponse(&Response{Status: 200, Body: []byte("frame"), Compressed: true})
	if b[1]&^olderFlags == 0 {
		t.Errorf("flags %#x: an older release would decode this as a plain body", b[1])
	}
	b = EncodeResponse(&Response{Status: 200, Body: []byte("plain")})
	if b[1]&^olderFlags != 0 {
		t.Errorf("flags %#x of a plain answer: older releases could no longer read it", b[1])
	}
	if _, err := DecodeResponse([]byte{1, flagCompressed, 0x90, 0x03, 0}); err == nil {
		t.Error("compressed without a body decodes; want an error")
	}
}

func FuzzDecodeAnswer(f *testing.F) {
	f.Add(EncodeResponse(&Response{Status: 200, Header: http.Header{"A": {"b", ""}}, Body: []byte("x")}))
	f.Add([]byte{1, 6, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResponse(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes (the encoding is canonical
		// up to header order, which EncodeResponse sorts).
		if again := EncodeResponse(r); !bytes.Equal(again, b) {
			if r2, err := DecodeResponse(again); err != nil || !reflect.DeepEqual(r, r2) {
				t.Fatalf("re-encoding %v changed the answer: %+v vs %+v (%v)", b, r, r2, err)
			}
		}
	})
}

// AppendResponse appends exactly EncodeResponse's bytes, whatever the
// buffer holds already, and allocates nothing into a buffer with room (up
// to 16 header names).
func TestAppendResponse(t *testing.T) {
	many := http.Header{}
	for i := range 20 {
		many[fmt.Sprintf("X-H%02d", 19-i)] = []string{fmt.Sprint(i), ""}
	}
	for _, tc := range []struct {
		name string
		r    *Response
	}{
		{"nil", nil},
		{"empty", &Response{}},
		{"headers and body", &Response{Status: 201, Header: http.Header{"B": {"2", "1"}, "A": {""}}, Body: []byte("body")}},
		{"20 headers", &Response{Status: 200, Header: many, Body: []byte{}}},
		{"too large", &Response{Status: 200, TooLarge: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := []byte("prefix")
			got := AppendResponse(append([]byte(nil), prefix...), tc.r)
			want := append(append([]byte(nil), prefix...), EncodeResponse(tc.r)...)
			if !bytes.Equal(got, want) {
				t.Fatalf("AppendResponse = %x; want %x", got, want)
			}
			if tc.r == nil || len(tc.r.Header) > 16 {
				return
			}
			buf := make([]byte, 0, 4096)
			if n := testing.AllocsPerRun(100, func() { buf = AppendResponse(buf[:0], tc.r) }); n != 0 {
				t.Errorf("AppendResponse into a buffer with room: %v allocations; want 0", n)
			}
		})
	}
}
