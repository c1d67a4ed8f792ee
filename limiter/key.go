package limiter

import (
	"encoding/binary"
	"encoding/hex"
	"math/bits"
	"net/netip"
)

// Key identifies the client address block that a limiter counts a request
// against: one IPv4 address (/32) or one IPv6 /64. Make keys with [Bucket].
//
// Key is a small comparable value, 16 bytes, safe to copy and to use as a map
// key. The zero Key is the key of the IPv6 block ::/64 (which holds the
// loopback address ::1) and also what [Bucket] returns for an invalid address.
type Key struct {
	b [16]byte // the block's first address in 16-byte form; IPv4 as ::ffff:a.b.c.d
}

// Bucket returns the key of the address block addr is counted in: IPv4
// addresses are counted one by one, IPv6 addresses by /64, because one IPv6
// host usually controls a whole /64. An IPv4-mapped IPv6 address
// (::ffff:a.b.c.d) is counted as the IPv4 address a.b.c.d, and a zone
// (fe80::1%eth0) is ignored. An invalid address returns the zero Key.
func Bucket(addr netip.Addr) Key {
	var k Key
	switch {
	case !addr.IsValid():
	case addr.Unmap().Is4():
		k.b = addr.Unmap().As16() // ::ffff:a.b.c.d, distinct from every IPv6 /64 below
	default:
		b := addr.As16()
		copy(k.b[:8], b[:8]) // /64: the last 8 bytes stay zero
	}
	return k
}

// Hashed returns the key of a client named by a hash instead of an address
// (a route limit by identity or by header): the first 16 bytes of sum, with
// two bits set so that it never equals a key of [Bucket] (an IPv4 key's
// first byte is 0; an IPv6 /64 key's last byte is 0). sum must be a
// cryptographic hash, so that clients cannot choose colliding keys.
func Hashed(sum [32]byte) Key {
	var k Key
	copy(k.b[:], sum[:16])
	k.b[0] |= 0x80
	k.b[15] |= 0x01
	return k
}

// IsHashed reports whether k was made by [Hashed].
func (k Key) IsHashed() bool { return k.b[0]&0x80 != 0 && k.b[15] != 0 }

// Prefix returns the address block k stands for: an IPv4 /32 or an IPv6 /64.
// A key made by [Hashed] stands for no block: the zero Prefix.
func (k Key) Prefix() netip.Prefix {
	if k.IsHashed() {
		return netip.Prefix{}
	}
	a := netip.AddrFrom16(k.b)
	if a.Is4In6() {
		return netip.PrefixFrom(a.Unmap(), 32)
	}
	return netip.PrefixFrom(a, 64)
}

// As16 returns k's 16 bytes: the block's first address in 16-byte form (an
// IPv4 block as ::ffff:a.b.c.d). Two keys are equal exactly when their bytes
// are; a backend that stores state elsewhere (Redis) hashes them into its
// key names.
func (k Key) As16() [16]byte { return k.b }

// String returns the block in CIDR notation, such as "192.0.2.1/32" or
// "2001:db8::/64"; a hashed key is "hash:" and its bytes in hex.
func (k Key) String() string {
	if k.IsHashed() {
		return "hash:" + hex.EncodeToString(k.b[:])
	}
	return k.Prefix().String()
}

// hash mixes k with a secret per-limiter seed (wyhash's multiply-fold), so that
// a client cannot choose addresses that all land in one shard.
func (k Key) hash(seed [2]uint64) uint64 {
	a := binary.LittleEndian.Uint64(k.b[:8]) ^ seed[0]
	b := binary.LittleEndian.Uint64(k.b[8:]) ^ seed[1]
	hi, lo := bits.Mul64(a, b)
	hi, lo = bits.Mul64(hi^lo^seed[0], 0x9e3779b97f4a7c15)
	return hi ^ lo
}
