package proxy

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// renewer renews the leases of the claims of requests still running. Each
// claim has one goroutine, owned by the renewer, which Close waits for.
type renewer struct {
	store keystore.Store
	log   *slog.Logger
	wg    sync.WaitGroup
}

func (rn *renewer) init(s keystore.Store, log *slog.Logger) {
	rn.store, rn.log = s, log
}

// leaseHandle stops one claim's renewals.
type leaseHandle struct {
	stopc chan struct{}
	done  chan struct{}
}

// start renews (key, token)'s lease every lease/3 until stop is called or
// maxLease has passed since the claim (DESIGN.md step 5).
func (rn *renewer) start(key keystore.Key, token uint64, lease, maxLease time.Duration) *leaseHandle {
	h := &leaseHandle{stopc: make(chan struct{}), done: make(chan struct{})}
	rn.wg.Add(1)
	go func() {
		defer rn.wg.Done()
		defer close(h.done)
		claimed := time.Now()
		t := time.NewTicker(max(lease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-h.stopc:
				return
			case now := <-t.C:
				if now.Sub(claimed) >= maxLease {
					rn.log.Warn("request outlived max_lease; its claim is no longer renewed")
					return
				}
				// Never past max_lease from the claim.
				l := min(lease, maxLease-now.Sub(claimed))
				ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
				_, err := rn.store.Renew(ctx, key, token, l)
				cancel()
				if errors.Is(err, keystore.ErrLeaseLost) || errors.Is(err, keystore.ErrNotFound) {
					rn.log.Warn("lease lost while the request ran", "error", err)
					return
				}
				if err != nil {
					rn.log.Warn("lease renewal failed", "error", err)
				}
			}
		}
	}()
	return h
}

// stop ends the renewals and waits for an in-progress renewal to finish, so
// that no renewal races the record's completion.
func (h *leaseHandle) stop() {
	close(h.stopc)
	<-h.done
}

func (rn *renewer) close() { rn.wg.Wait() }
