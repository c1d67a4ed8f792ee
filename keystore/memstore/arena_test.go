package memstore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// arenaStats sums the shards' arena counters.
func arenaStats(s *Store) (pageBytes, liveBytes, pages int) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		pageBytes += sh.arena.pageBytes
		liveBytes += sh.arena.liveBytes
		for _, p := range sh.arena.pages {
			if p != nil {
				pages++
			}
		}
		sh.mu.Unlock()
	}
	return
}

// Records of two retentions interleaved: when the short ones (three in four)
// expire, every page is about three quarters dead; the sweep compacts the pages and every record
// left replays byte for byte; when the rest expire every page is freed.
func TestArenaCompactsAndFrees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := newTestStore(t, Options{MaxEntries: 1 << 20, MaxBytes: 1 << 40})
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 6000
	bodies := make(map[keystore.Key][]byte)
	var long []keystore.Key
	for i := range n {
		k := keystore.NewKey("arena", fmt.Sprint(i))
		size := rng.IntN(8000)
		if i%97 == 0 {
			size = bigData + rng.IntN(bigData) // a page of its own
		}
		body := make([]byte, size)
		for j := range body {
			body[j] = byte(rng.Uint32())
		}
		o := opts("a")
		o.Route = fmt.Sprintf("route_%d", i%7)
		if i%4 != 0 {
			o.Retention = time.Minute
		} else {
			long = append(long, k)
			bodies[k] = body
		}
		res, err := s.Reserve(ctx, k, o)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CompleteClaim(ctx, k, res.Claim, &keystore.Response{Status: 200, Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	before, live, _ := arenaStats(s)
	if before < live {
		t.Fatalf("page bytes %d < live bytes %d", before, live)
	}
	clk.Advance(2 * time.Minute)
	s.sweep()
	after, live, _ := arenaStats(s)
	if got := s.Len(); got != n/4 {
		t.Fatalf("Len after the short records expired = %d; want %d", got, n/4)
	}
	if limit := 2*live + numShards*2*pageSize; after > limit {
		t.Errorf("page bytes after the sweep = %d for %d live bytes; want at most %d (compacted)", after, live, limit)
	}
	if after >= before/2 {
		t.Errorf("page bytes %d → %d: three records in four expired, want at least half freed", before, after)
	}
	for i, k := range long {
		rec, err := s.Get(ctx, k)
		if err != nil {
			t.Fatalf("Get(long #%d) = %v", i, err)
		}
		if !bytes.Equal(rec.Response.Body, bodies[k]) || rec.Route != fmt.Sprintf("route_%d", (4*i)%7) {
			t.Fatalf("long #%d after compaction: route %q, body of %d bytes equal=%v", i, rec.Route, len(rec.Response.Body), bytes.Equal(rec.Response.Body, bodies[k]))
		}
	}
	clk.Advance(time.Hour)
	s.sweep()
	if pb, lb, pages := arenaStats(s); pb != 0 || lb != 0 || pages != 0 {
		t.Errorf("after every record expired: %d page bytes, %d live bytes, %d pages; want none", pb, lb, pages)
	}
	if s.Len() != 0 || s.Bytes() != 0 {
		t.Errorf("Len, Bytes = %d, %d; want 0, 0", s.Len(), s.Bytes())
	}
}

// Slots are reused: a store that keeps taking and dropping records does not
// grow its slabs beyond what it held at once.
func TestSlotsAreReused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newTestStore(t, Options{})
	slabs := func() (n int) {
		for i := range s.shards {
			n += len(s.shards[i].slabs)
		}
		return n
	}
	for round := range 5 {
		for i := range 2000 {
			k := keystore.NewKey("reuse", fmt.Sprint(round), fmt.Sprint(i))
			res, err := s.Reserve(ctx, k, opts("a"))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, k, res.Token); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := slabs(); got > numShards {
		t.Errorf("slabs after 10,000 claims of which one was held at a time = %d; want at most one a shard (%d)", got, numShards)
	}
}

// A replayed answer shares the arena's bytes: it stays intact after its
// record expired, was swept and its page freed, and many records were
// written since.
func TestReplayOutlivesItsPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := newTestStore(t, Options{})
	k := keystore.NewKey("old")
	body := bytes.Repeat([]byte("abc"), 100)
	o := opts("a")
	o.Retention = time.Minute
	res, err := s.Reserve(ctx, k, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteClaim(ctx, k, res.Claim, &keystore.Response{Status: 200, Body: body}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Reserve(ctx, k, o)
	if err != nil || rep.Response == nil {
		t.Fatalf("replay = %+v, %v", rep, err)
	}
	clk.Advance(2 * time.Minute)
	s.sweep()
	for i := range 3000 {
		k := keystore.NewKey("new", fmt.Sprint(i))
		res, err := s.Reserve(ctx, k, opts("a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CompleteClaim(ctx, k, res.Claim, &keystore.Response{Status: 200, Body: bytes.Repeat([]byte{'z'}, 300)}); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(rep.Response.Body, body) {
		t.Errorf("the replayed body changed after its record went: %q", rep.Response.Body[:20])
	}
}
