package limiter

import (
	"crypto/sha256"
	"net/netip"
	"strings"
	"testing"
)

// FuzzHashedNeverBucket: a key made from a hash never equals a key made
// from an address, whatever the hash and the address.
func FuzzHashedNeverBucket(f *testing.F) {
	f.Add([]byte("limit/identity"), []byte{192, 0, 2, 1})
	f.Add([]byte{}, []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, material, addr []byte) {
		var sum [32]byte
		copy(sum[:], material) // any bytes, not only real hashes
		h := Hashed(sum)
		if !h.IsHashed() {
			t.Fatalf("Hashed(%x) is not hashed", sum)
		}
		a, ok := netip.AddrFromSlice(addr)
		b := Bucket(a)
		if ok && b == h {
			t.Fatalf("Hashed(%x) = Bucket(%s)", sum, a)
		}
		if b.IsHashed() {
			t.Fatalf("Bucket(%s) reports hashed", a)
		}
	})
}

func TestHashedKey(t *testing.T) {
	t.Parallel()
	k1, k2 := Hashed(sha256.Sum256([]byte("alice"))), Hashed(sha256.Sum256([]byte("bob")))
	if k1 == k2 || k1 != Hashed(sha256.Sum256([]byte("alice"))) {
		t.Errorf("hashed keys: alice %s, bob %s", k1, k2)
	}
	if k1.Prefix().IsValid() || !strings.HasPrefix(k1.String(), "hash:") {
		t.Errorf("hashed key Prefix %v, String %s; want none and hash:…", k1.Prefix(), k1)
	}
	for _, s := range []string{"192.0.2.1", "2001:db8::1", "::1", "0.0.0.0", "ff00::1", "8000::1"} {
		if Bucket(netip.MustParseAddr(s)).IsHashed() {
			t.Errorf("Bucket(%s) reports hashed", s)
		}
	}
}
