package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
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
