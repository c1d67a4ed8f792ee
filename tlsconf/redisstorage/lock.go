package redisstorage

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"
)

// Lock takes the named lock, waiting (polling every LockPoll) while another
// holder has it, until ctx ends. The lock is held, and refreshed, until
// Unlock or Close; if the process dies it lapses after LockTTL.
func (s *Storage) Lock(ctx context.Context, name string) error {
	token := newToken()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		ok, err := s.tryLock(ctx, name, token)
		if ok || err != nil {
			return err
		}
		t.Reset(s.poll)
	}
}

// TryLock takes the named lock if it is free and reports whether it did.
func (s *Storage) TryLock(ctx context.Context, name string) (bool, error) {
	return s.tryLock(ctx, name, newToken())
}

func (s *Storage) tryLock(ctx context.Context, name, token string) (bool, error) {
	if s.isClosed() {
		return false, ErrClosed
	}
	key := s.lockKey(name)
	n, err := acquireScript.Run(ctx, s.rdb, []string{key}, token, s.ttl.Milliseconds()).Int()
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, fmt.Errorf("redisstorage: lock %s: %w", name, err)
	}
	if n != codeOK {
		return false, nil
	}
	h := &heldLock{key: key, token: token, stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.release(h)
		return false, ErrClosed
	}
	if old := s.held[name]; old != nil {
		// This Storage held name already and the lock lapsed meanwhile
		// (its refresher found the token gone); the old entry is dead.
		s.stopRefresh(old)
	}
	s.held[name] = h
	s.mu.Unlock()
	go s.refresh(name, h)
	return true, nil
}

// Unlock releases the named lock. It returns an error wrapping
// [ErrNotLocked] when this Storage does not hold name, and one wrapping
// [ErrLockLost] when the lock had lapsed or been taken over in Redis.
func (s *Storage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("%w: %s", ErrNotLocked, name)
	}
	s.stopRefresh(h)
	n, err := releaseScript.Run(ctx, s.rdb, []string{h.key}, h.token).Int()
	if err != nil {
		return fmt.Errorf("redisstorage: unlock %s: %w", name, err)
	}
	if n != codeOK {
		return fmt.Errorf("%w: %s", ErrLockLost, name)
	}
	return nil
}

// refresh extends h's TTL every third of it until stopped, or until the
// token is found gone.
func (s *Storage) refresh(name string, h *heldLock) {
	defer close(h.done)
	every := s.ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		n, err := refreshScript.Run(ctx, s.rdb, []string{h.key}, h.token, s.ttl.Milliseconds()).Int()
		cancel()
		switch {
		case err != nil:
			s.log.Warn("certmagic storage: cannot refresh a lock; it lapses unless a refresh succeeds in time",
				"lock", name, "ttl", s.ttl.String(), "error", err)
		case n != codeOK:
			s.log.Error("certmagic storage: lock lost (lapsed or taken over)", "lock", name)
			return
		}
	}
}

// stopRefresh stops h's refresher and waits for it. It is called once per
// lock, by whoever removed h from s.held.
func (s *Storage) stopRefresh(h *heldLock) {
	close(h.stop)
	<-h.done
}

// release deletes h's lock in Redis, bounded by a short timeout.
func (s *Storage) release(h *heldLock) error {
	ctx, cancel := context.WithTimeout(context.Background(), max(s.ttl/3, time.Second))
	defer cancel()
	return releaseScript.Run(ctx, s.rdb, []string{h.key}, h.token).Err()
}

// isClosed reports whether Close was called.
func (s *Storage) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close releases every lock this Storage holds (best effort: one that
// cannot be released lapses after LockTTL) and makes Lock and TryLock
// fail with [ErrClosed]. Load, Store and the other methods keep working
// while the client is open. Close is idempotent.
func (s *Storage) Close() error {
	var errs []error
	s.releaseAll.Do(func() {
		s.mu.Lock()
		s.closed = true
		held := s.held
		s.held = map[string]*heldLock{}
		s.mu.Unlock()
		for name, h := range held {
			s.stopRefresh(h)
			if err := s.release(h); err != nil {
				errs = append(errs, fmt.Errorf("redisstorage: release %s: %w", name, err))
			}
		}
	})
	return errors.Join(errs...)
}

func newToken() string {
	return rand.Text()
}
