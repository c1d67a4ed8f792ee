package limiter_test

import (
	"net/netip"
	"testing"

	"github.com/idemgate/idemgate/limiter"
)

func TestBucket(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		addr string
		want string // the key's prefix
	}{
		{"ipv4 is its own block", "192.0.2.1", "192.0.2.1/32"},
		{"ipv4-mapped ipv6 is the ipv4 address", "::ffff:192.0.2.1", "192.0.2.1/32"},
		{"ipv6 by /64", "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"ipv6 zone ignored", "fe80::1%eth0", "fe80::/64"},
		{"ipv6 loopback", "::1", "::/64"},
		{"ipv4 all zeros", "0.0.0.0", "0.0.0.0/32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := limiter.Bucket(mustAddr(t, tt.addr)).String(); got != tt.want {
				t.Errorf("Bucket(%s) = %s; want %s", tt.addr, got, tt.want)
			}
		})
	}
}

func TestBucketSharing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{"same /64", "2001:db8:0:1::1", "2001:db8:0:1:ffff:ffff:ffff:ffff", true},
		{"neighbouring /64s", "2001:db8:0:1::1", "2001:db8:0:2::1", false},
		{"mapped and plain ipv4", "::ffff:198.51.100.7", "198.51.100.7", true},
		{"neighbouring ipv4", "198.51.100.7", "198.51.100.8", false},
		{"ipv4 vs ipv6 with the same low bytes", "::c633:6407", "198.51.100.7", false},
		{"ipv4 0.0.0.0 vs ipv6 ::", "0.0.0.0", "::", false},
		{"zones", "fe80::1%eth0", "fe80::2%eth1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ka, kb := limiter.Bucket(mustAddr(t, tt.a)), limiter.Bucket(mustAddr(t, tt.b))
			if got := ka == kb; got != tt.same {
				t.Errorf("Bucket(%s) == Bucket(%s) is %v (%s, %s); want %v", tt.a, tt.b, got, ka, kb, tt.same)
			}
		})
	}
}

func TestBucketInvalid(t *testing.T) {
	t.Parallel()
	if got := limiter.Bucket(netip.Addr{}); got != (limiter.Key{}) {
		t.Errorf("Bucket(invalid) = %s; want the zero Key", got)
	}
}
