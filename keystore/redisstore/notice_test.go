package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// A notice published by one process's Notices wakes the watchers of the
// key in another's (two clients, one Redis), and only of that key; the
// payload is the hashed key, never a raw one.
func TestNoticesCrossProcesses(t *testing.T) {
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		prefix := redistest.Prefix(t)
		a := NewNotices(newClient(t, topo), prefix, nil)
		b := NewNotices(newClient(t, topo), prefix, nil)
		t.Cleanup(func() { a.Close(); b.Close() })
		k1, k2 := keystore.NewKey("t", "k1"), keystore.NewKey("t", "k2")
		w1, stop1 := b.Watch(k1)
		defer stop1()
		w2, stop2 := b.Watch(k2)
		defer stop2()
		// The subscription is confirmed asynchronously: publish until it
		// arrives (a lost notice is only a late one, by design).
		deadline := time.After(5 * time.Second)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for got := false; !got; {
			if err := a.Publish(context.Background(), k1); err != nil {
				t.Fatal(err)
			}
			select {
			case <-w1:
				got = true
			case <-w2:
				t.Fatal("the watcher of another key was woken")
			case <-deadline:
				t.Fatal("no notice crossed to the other process")
			case <-tick.C:
			}
		}
		if a.Channel() != prefix+"notices" {
			t.Errorf("channel %q", a.Channel())
		}
	})
}

// A completion or a release made with a folded notice publishes the
// record's key on the channel from its own script and marks the notice
// published; one that settles nothing (a claim taken over) publishes
// nothing and leaves it unmarked, for the caller to publish as before.
func TestFoldedNotice(t *testing.T) {
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		prefix := redistest.Prefix(t)
		c := newClient(t, topo)
		s := newStore(t, c, prefix)
		n := NewNotices(newClient(t, topo), prefix, nil)
		t.Cleanup(func() { n.Close() })
		sub := c.Subscribe(context.Background(), n.Channel())
		defer sub.Close()
		if _, err := sub.Receive(context.Background()); err != nil {
			t.Fatal(err)
		}
		msgs := sub.Channel()
		ctx := context.Background()
		expect := func(name string, fn *keystore.FoldedNotice, k keystore.Key, published bool) {
			t.Helper()
			if fn.Published != published {
				t.Errorf("%s: Published = %v, want %v", name, fn.Published, published)
			}
			if !published {
				return
			}
			select {
			case m := <-msgs:
				if m.Payload != k.String() {
					t.Errorf("%s: notice %q, want %q", name, m.Payload, k.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no notice within 10s", name)
			}
		}
		resp := &keystore.Response{Status: 201, Body: []byte(`{}`)}

		k1 := keystore.NewKey("t", "completed")
		r1, err := s.Reserve(ctx, k1, reserveOpts("a"))
		if err != nil {
			t.Fatal(err)
		}
		fn := &keystore.FoldedNotice{Channel: n.Channel()}
		if _, err := s.CompleteClaim(keystore.WithFoldedNotice(ctx, fn), k1, r1.Claim, resp); err != nil {
			t.Fatal(err)
		}
		expect("complete claim", fn, k1, true)

		k2 := keystore.NewKey("t", "released")
		r2, err := s.Reserve(ctx, k2, reserveOpts("a"))
		if err != nil {
			t.Fatal(err)
		}
		fn = &keystore.FoldedNotice{Channel: n.Channel()}
		if err := s.Release(keystore.WithFoldedNotice(ctx, fn), k2, r2.Token); err != nil {
			t.Fatal(err)
		}
		expect("release", fn, k2, true)

		// Taken over: the first claim's completion and release settle nothing.
		k3 := keystore.NewKey("t", "taken over")
		r3, err := s.Reserve(ctx, k3, reserveOpts("a"))
		if err != nil {
			t.Fatal(err)
		}
		s.advance(2 * storetest.Lease)
		if _, err := s.Reserve(ctx, k3, reserveOpts("a")); err != nil {
			t.Fatal(err)
		}
		fn = &keystore.FoldedNotice{Channel: n.Channel()}
		if _, err := s.CompleteClaim(keystore.WithFoldedNotice(ctx, fn), k3, r3.Claim, resp); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Fatalf("late complete claim = %v, want ErrLeaseLost", err)
		}
		expect("late complete claim", fn, k3, false)
		if err := s.Release(keystore.WithFoldedNotice(ctx, fn), k3, r3.Token); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Fatalf("late release = %v, want ErrLeaseLost", err)
		}
		expect("late release", fn, k3, false)
		select {
		case m := <-msgs:
			t.Errorf("a notice %q for a call that settled nothing", m.Payload)
		default:
		}
	})
}

// A notices channel refused to the ACL user: the completion and the
// release that fold a notice are stored and succeed (the waiters poll);
// before, the refused PUBLISH failed the call after its write, and the
// proxy retried a completion that had been stored.
func TestFoldedNoticeChannelRefused(t *testing.T) {
	t.Parallel()
	_, user := aclUser(t, redistest.StartOwn(t), "~*", "resetchannels", "+@all")
	for _, eval := range []bool{false, true} {
		s := newStoreOpts(t, user, Options{KeyPrefix: redistest.Prefix(t), EvalScripts: eval})
		ctx := t.Context()
		k := storetest.NewTestKey(t)
		r, err := s.Reserve(ctx, k, reserveOpts("a"))
		if err != nil {
			t.Fatal(err)
		}
		fn := &keystore.FoldedNotice{Channel: s.prefix + "notices"}
		if _, err := s.CompleteClaim(keystore.WithFoldedNotice(ctx, fn), k, r.Claim, &keystore.Response{Status: 201}); err != nil {
			t.Fatalf("EvalScripts=%v: CompleteClaim with a refused channel = %v; want nil", eval, err)
		}
		if rec, err := s.Get(ctx, k); err != nil || rec.State != keystore.StateCompleted {
			t.Errorf("EvalScripts=%v: record %+v, %v; want completed", eval, rec, err)
		}
		k2 := storetest.NewTestKey(t)
		r2, err := s.Reserve(ctx, k2, reserveOpts("a"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Release(keystore.WithFoldedNotice(ctx, &keystore.FoldedNotice{Channel: s.prefix + "notices"}), k2, r2.Token); err != nil {
			t.Errorf("EvalScripts=%v: Release with a refused channel = %v; want nil", eval, err)
		}
	}
}

// A notices channel refused to the ACL user: the subscription's refusal is
// logged once (go-redis alone retries it in silence), and watching goes on.
func TestNoticesSubscriptionRefusedLogged(t *testing.T) {
	t.Parallel()
	admin, user := aclUser(t, redistest.StartOwn(t), "~*", "resetchannels", "+@all")
	var logs testutil.SyncBuffer
	n := NewNotices(user, redistest.Prefix(t), slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { n.Close() })
	_, stop := n.Watch(keystore.NewKey("t", "k"))
	defer stop()
	testutil.Eventually(t, 10*time.Second, "the refusal's warning", func() bool {
		return strings.Contains(logs.String(), "completion notices: the subscription was refused") && strings.Contains(logs.String(), "NOPERM")
	})
	// A subscription Redis confirms logs nothing.
	var quiet testutil.SyncBuffer
	ok := NewNotices(admin, redistest.Prefix(t), slog.New(slog.NewTextHandler(&quiet, nil)))
	t.Cleanup(func() { ok.Close() })
	_, stop2 := ok.Watch(keystore.NewKey("t", "k"))
	defer stop2()
	testutil.Eventually(t, 10*time.Second, "the subscription", func() bool {
		v, err := admin.PubSubNumSub(t.Context(), ok.Channel()).Result()
		return err == nil && v[ok.Channel()] == 1
	})
	if quiet.String() != "" {
		t.Errorf("a confirmed subscription logged %q", quiet.String())
	}
}
