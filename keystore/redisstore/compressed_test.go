package redisstore

import (
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/compressed"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// TestConformanceCompressed runs the suite with store.compression: zstd,
// in both record formats: the suite's answers (512-byte bodies) are stored
// compressed.
func TestConformanceCompressed(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	for _, f := range formats {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
				s := newStoreOpts(t, c, Options{KeyPrefix: prefix, RecordFormat: f})
				cs, err := compressed.New(s, compressed.Options{Compress: true})
				if err != nil {
					t.Fatal(err)
				}
				return cs, s.advance
			})
		})
	}
}
