package sealed

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// TestSentMarkInfoSealed: what a reconcile route's sent mark keeps of the
// original request (its Host, Authorization, Cookie and path parameters,
// under the proxy's Probe-… names) reaches the inner store only as
// ciphertext, opens whole through the sealed store, and is gone once the
// record resolves.
func TestSentMarkInfoSealed(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	s := mustNew(t, m, newKey(t))
	ctx := context.Background()
	k := keystore.NewKey("probe-info")
	res, err := s.Reserve(ctx, k, keystore.ReserveOptions{Fingerprint: keystore.Fingerprint{1}, Route: "pay", Lease: time.Minute, Retention: time.Hour, Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	info := keystore.UnknownInfo("POST", "/carts/c1/pay", "key-1", "req-1")
	info.Header["Probe-Host"] = []string{"shop.internal"}
	info.Header["Probe-H-Authorization"] = []string{"Bearer s3cr3t-token"}
	info.Header["Probe-H-Cookie"] = []string{"sid=s3cr3t-session"}
	info.Header["Probe-P-cart"] = []string{"c1"}
	if err := s.MarkSent(ctx, k, res.Token, info); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkUnknown(ctx, k, res.Token, keystore.CauseBroken); err != nil {
		t.Fatal(err)
	}
	inner, err := m.Get(ctx, k)
	if err != nil || inner.Info == nil {
		t.Fatalf("inner Get = %+v, %v", inner, err)
	}
	if inner.Info.Header != nil {
		t.Errorf("inner info header = %v; want none (all sealed)", inner.Info.Header)
	}
	for _, secret := range []string{"s3cr3t-token", "s3cr3t-session", "shop.internal", "Probe-H-Authorization"} {
		if bytes.Contains(inner.Info.Body, []byte(secret)) {
			t.Errorf("inner info holds %q in clear", secret)
		}
	}
	got, err := s.Get(ctx, k)
	if err != nil || got.Info == nil || got.Info.Header.Get("Probe-H-Authorization") != "Bearer s3cr3t-token" || got.Info.Header["Probe-P-cart"][0] != "c1" {
		t.Fatalf("sealed Get info = %+v, %v; want the original's headers", got.Info, err)
	}
	if err := s.Resolve(ctx, k, got.ClaimID, &keystore.Response{Status: 201, Body: []byte("found")}); err != nil {
		t.Fatal(err)
	}
	if after, err := m.Get(ctx, k); err != nil || after.Info != nil {
		t.Errorf("inner record after the resolution: info %+v, %v; want it gone", after.Info, err)
	}
}
