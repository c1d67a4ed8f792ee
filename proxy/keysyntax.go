package proxy

import (
	"fmt"
	"strings"

	"github.com/dunglas/httpsfv"

	"github.com/idemgate/idemgate/internal/modes"
)

// KeySyntax is the rule an idempotency key header's value must follow
// (idempotency.key_syntax; DESIGN.md step 4 and Profiles). A value that
// breaks it gets 400 idempotency_key_invalid and nothing is forwarded.
type KeySyntax uint8

const (
	// KeyStrict: 1–255 characters from '!' (0x21) to '~' (0x7E). The
	// default.
	KeyStrict KeySyntax = iota
	// KeyPrintable: 1–255 visible ASCII characters and inner spaces, as
	// Stripe's API takes keys (`order 1001`).
	KeyPrintable
	// KeySFString: an RFC 8941 Structured Field string (an Item; its
	// parameters are ignored), as draft-ietf-httpapi-idempotency-key-header-07
	// §2.1 defines the header; the key is the string's value, 1–255
	// characters. A value that does not begin with '"' is read as it is
	// under [KeyStrict], the bare form the draft's public conformance
	// vectors (sns45/anyonce) and many of its clients send: `abc` and
	// `"abc"` are one key. RFC 8941 would ignore such a field, which
	// would forward the write unprotected or answer "missing".
	KeySFString
)

// maxKeyLen is the longest key, in bytes, of every syntax.
const maxKeyLen = 255

// ParseKeySyntax returns the syntax named s ("" is [KeyStrict]).
func ParseKeySyntax(s string) (KeySyntax, error) {
	switch s {
	case "", modes.KeySyntaxStrict:
		return KeyStrict, nil
	case modes.KeySyntaxPrintable:
		return KeyPrintable, nil
	case modes.KeySyntaxSFString:
		return KeySFString, nil
	}
	return 0, fmt.Errorf("key syntax %q: want %q, %q or %q", s, modes.KeySyntaxStrict, modes.KeySyntaxPrintable, modes.KeySyntaxSFString)
}

// String returns the syntax's config name.
func (s KeySyntax) String() string {
	switch s {
	case KeyPrintable:
		return modes.KeySyntaxPrintable
	case KeySFString:
		return modes.KeySyntaxSFString
	}
	return modes.KeySyntaxStrict
}

// Key returns the key that the header value v carries under s, and false
// when v breaks s.
func (s KeySyntax) Key(v string) (string, bool) {
	switch s {
	case KeyPrintable:
		return v, validPrintableKey(v)
	case KeySFString:
		if !strings.HasPrefix(strings.TrimLeft(v, " \t"), `"`) {
			return v, validKey(v)
		}
		return sfStringKey(v)
	}
	return v, validKey(v)
}

// validKey reports whether key is 1–255 characters from '!' (0x21) to '~'
// (0x7E), as DESIGN.md step 4 requires.
func validKey(key string) bool {
	if len(key) == 0 || len(key) > maxKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < '!' || c > '~' {
			return false
		}
	}
	return true
}

// validPrintableKey reports whether key is 1–255 characters from ' ' (0x20)
// to '~' (0x7E) that neither start nor end with a space.
func validPrintableKey(key string) bool {
	if len(key) == 0 || len(key) > maxKeyLen || key[0] == ' ' || key[len(key)-1] == ' ' {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < ' ' || c > '~' {
			return false
		}
	}
	return true
}

// sfStringKey parses v as an RFC 8941 Item whose bare item is a String
// and returns the string's value, when it is 1–255 characters.
func sfStringKey(v string) (string, bool) {
	item, err := httpsfv.UnmarshalItem([]string{v})
	if err != nil {
		return "", false
	}
	key, ok := item.Value.(string)
	if !ok || len(key) == 0 || len(key) > maxKeyLen {
		return "", false
	}
	return key, true
}
