package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/canonjson"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

const formCT = "application/x-www-form-urlencoded"

func TestFormFingerprint(t *testing.T) {
	t.Parallel()
	ptr, err := canonjson.ParsePointer("/metadata[sent_at]")
	if err != nil {
		t.Fatal(err)
	}
	body := "amount=100&currency=usd&items[]=a&items[]=b&metadata[order]=6735"
	base := fingerprint("POST", "/v1/charges", "", formCT, []byte(body), nil)
	for _, tc := range []struct {
		name, ct, body string
		ignore         []canonjson.Pointer
		same           bool
	}{
		{"identical", formCT, body, nil, true},
		{"media type case and parameters", "Application/X-WWW-Form-Urlencoded; charset=utf-8", body, nil, true},
		{"distinct names reordered", formCT, "metadata[order]=6735&items[]=a&currency=usd&items[]=b&amount=100", nil, true},
		{"re-encoded", formCT, "amount=%31%30%30&currency=usd&items%5B%5D=a&items%5b%5d=b&metadata%5Border%5D=6735", nil, true},
		{"ignored parameter", formCT, body + "&metadata[sent_at]=1733000000", []canonjson.Pointer{ptr}, true},
		{"order within one name", formCT, "amount=100&currency=usd&items[]=b&items[]=a&metadata[order]=6735", nil, false},
		{"another value", formCT, "amount=101&currency=usd&items[]=a&items[]=b&metadata[order]=6735", nil, false},
		{"form that does not parse is raw", formCT, body + ";x=1", nil, false},
		{"the same bytes as text", "text/plain", body, nil, false},
		{"the same bytes as JSON", "application/json", body, nil, false},
	} {
		got := fingerprint("POST", "/v1/charges", "", tc.ct, []byte(tc.body), tc.ignore)
		if (got == base) != tc.same {
			t.Errorf("%s: same fingerprint = %v; want %v", tc.name, got == base, tc.same)
		}
	}
	// A form that does not parse is hashed raw: text/plain with the same
	// bytes is still another kind.
	bad := "a=1;b=2"
	if fingerprint("POST", "/p", "", formCT, []byte(bad), nil) == fingerprint("POST", "/p", "", formCT, []byte("b=2;a=1"), nil) {
		t.Errorf("two unparseable forms share a fingerprint")
	}
	v2, _ := fingerprintHeld(fingerprintV2, "POST", "/v1/charges", "", formCT, []byte(body), fingerprintIgnore{}, nil)
	raw, _ := fingerprintHeld(fingerprintV2, "POST", "/v1/charges", "", "text/plain", []byte(body), fingerprintIgnore{}, nil)
	if v2 != raw || v2 == base {
		t.Errorf("version 2 hashes a form raw: got %v (raw %v, version 3 %v)", v2, raw, base)
	}
}

// TestFormRetries: through the proxy, a retry whose form is ordered or
// encoded differently replays; another order of one name's values, or
// another value, is key_reused.
func TestFormRetries(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	routes := []Route{{Name: "charges", Method: "POST", Path: "/v1/charges", Idempotent: true, FingerprintIgnore: []string{"/metadata[sent_at]"}}}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Stages.Routes = routes })
	send := func(key, body string) result {
		t.Helper()
		req, _ := http.NewRequest("POST", tp.URL+"/v1/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer a")
		req.Header.Set("Content-Type", formCT)
		res, err := tp.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readResult(t, res)
	}
	first := send("k1", "amount=100&currency=usd&items[]=a&items[]=b&metadata[sent_at]=1")
	if first.status != 201 {
		t.Fatalf("first = %v; want 201", first)
	}
	for _, retry := range []string{
		"currency=usd&amount=100&items[]=a&items[]=b&metadata[sent_at]=1",
		"items%5B%5D=a&amount=%31%30%30&currency=usd&items[]=b",
		"amount=100&&currency=usd&items[]=a&metadata%5Bsent_at%5D=2&items[]=b&",
	} {
		if r := send("k1", retry); r.status != 201 || string(r.body) != string(first.body) || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry %q = %v; want the first answer replayed", retry, r)
		}
	}
	for _, other := range []string{
		"amount=100&currency=usd&items[]=b&items[]=a",
		"amount=100&currency=eur&items[]=a&items[]=b",
		"amount=100&currency=usd&items[]=a",
	} {
		if r := send("k1", other); r.status != 409 || problemCode(t, r) != "idempotency_key_reused" {
			t.Errorf("another form %q = %v; want 409 idempotency_key_reused", other, r)
		}
	}
	if n := up.total.Load(); n != 1 {
		t.Errorf("the upstream ran %d requests; want 1", n)
	}
}

// TestUpgradeReplaysV2FormRecords: a record written in fingerprint version
// 2 (a form hashed raw) is compared in version 2, so a retry with the same
// bytes replays across the upgrade; a reordered form under it is still a
// different request in that version.
func TestUpgradeReplaysV2FormRecords(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	routes := []Route{{Name: "charges", Method: "POST", Path: "/v1/charges", Idempotent: true}}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Stages.Routes = routes })
	ctx := context.Background()
	const body = "amount=100&currency=usd"
	sk := scopeKey(tp.p, "", http.Header{"Authorization": {"Bearer a"}}, "k-v2")
	fp, err := fingerprintHeld(fingerprintV2, "POST", "/v1/charges", "", formCT, []byte(body), fingerprintIgnore{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tp.store.Reserve(ctx, sk, keystore.ReserveOptions{Fingerprint: fp, FingerprintVersion: fingerprintV2, Route: "charges", Lease: time.Minute, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.store.Complete(ctx, sk, res.Token, &keystore.Response{Status: 201, Header: http.Header{"X-Release": {"2"}}, Body: []byte("revision 2's answer")}); err != nil {
		t.Fatal(err)
	}
	send := func(body string) result {
		t.Helper()
		req, _ := http.NewRequest("POST", tp.URL+"/v1/charges", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "k-v2")
		req.Header.Set("Authorization", "Bearer a")
		req.Header.Set("Content-Type", formCT)
		resp, err := tp.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readResult(t, resp)
	}
	if r := send(body); r.status != 201 || string(r.body) != "revision 2's answer" || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry after the upgrade = %v; want revision 2's answer replayed", r)
	}
	if r := send("currency=usd&amount=100"); r.status != 409 || problemCode(t, r) != "idempotency_key_reused" {
		t.Errorf("reordered form against a version 2 record = %v; want 409 (version 2 hashed it raw)", r)
	}
	if n := up.total.Load(); n != 0 {
		t.Errorf("the upstream ran %d requests; want 0", n)
	}
}
