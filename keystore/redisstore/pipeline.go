package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A pipeliner sends the script calls that concurrent requests make to
// Redis together (issue 17): a keyed write's two round trips stay two,
// but while one call is on the wire, the calls made meanwhile queue and go
// next, as one pipeline: one write, one read and one connection checkout
// (with its health-check system call) for all of them instead of one each.
// Those system calls were most of a Redis keyed write's extra CPU.
//
// It never waits to fill a batch. A call made while fewer than
// pipelineLanes sends are on the wire is sent at once, alone, on the
// caller's goroutine with the caller's context, exactly as without a
// pipeliner. Only calls made while every lane is busy queue; when a send
// ends, a goroutine sends the whole queue as one pipeline on that lane, and
// goes on while calls keep queueing. So at low load every call goes alone,
// and under load the batches grow with the load.
// (go-redis's own autopipeliner was measured first: its flusher holds a
// batch until the callers of the last one come back, for up to 2 ms; a
// proxy's callers come back only after the upstream answered, so it added
// 2–6 ms to the median keyed write at 2,000 req/s.)
//
// Each script is atomic and each call keeps its own reply, so sharing a
// pipeline changes nothing a script sees. A connection failure fails every
// call of its pipeline, each as it would fail alone. Nothing is resent
// (MaxRetries -1, [NewClient]).
type pipeliner struct {
	client redis.UniversalClient
	pair   *sender // with client
	// wait bounds a queued call's wait: the client's timeout, so that a
	// call behind a batch stuck on a hung Redis gives up when a call of
	// its own would have.
	wait *Timeout

	mu    sync.Mutex
	busy  int        // sends on the wire, at most pipelineLanes
	queue []*pending // calls waiting for the next batch, oldest first

	batches, pipelined atomic.Uint64 // pipelines sent, and the calls in them
}

// maxBatch bounds the calls in one pipeline; the rest go next.
const maxBatch = 128

// pipelineLanes is how many sends may be on the wire at once before calls
// queue. Measured on 2 cores with bench/driver (4 runs each, keyed first
// writes on Redis): 1 lane gave the fewest system calls in a closed loop
// but queued most calls at 2,000 req/s (median +1.2 ms over the bare
// proxy); 4 lanes kept the CPU per write within a few percent of 1 lane
// and halved that median. Over a network, where a round trip is longer,
// a call that finds every lane busy waits longer, so more lanes matter
// more there.
const pipelineLanes = 4

// pending is a queued call.
type pending struct {
	set  redis.Cmder // sent just before cmd, if not nil
	cmd  *redis.Cmd
	done chan struct{} // 1-buffered: the reply (or error) is in cmd
	// gone is set by a caller that stopped waiting: the call is not sent
	// if it has not been yet.
	gone atomic.Bool
}

var pendingPool = sync.Pool{New: func() any { return &pending{done: make(chan struct{}, 1)} }}

func newPipeliner(send *sender, wait *Timeout) *pipeliner {
	return &pipeliner{client: send.client, pair: send, wait: wait}
}

// process runs cmd, after set if set is not nil (a call's answer,
// [Store.do]), alone or in a pipeline: set and cmd always go together, set
// first, in one pipeline. It reports false when the caller stopped waiting
// (ctx ended, or no reply within p.wait) while cmd may still be sent:
// cmd's (and set's) arguments must then stay intact; err says why.
func (p *pipeliner) process(ctx context.Context, set redis.Cmder, cmd *redis.Cmd) (ok bool, err error) {
	p.mu.Lock()
	if p.busy < pipelineLanes {
		p.busy++
		p.mu.Unlock()
		p.pair.process(ctx, set, cmd)
		p.next()
		return true, nil
	}
	q := pendingPool.Get().(*pending)
	q.set, q.cmd = set, cmd
	p.queue = append(p.queue, q)
	p.mu.Unlock()
	wait := p.wait.Load()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-q.done:
		q.set, q.cmd = nil, nil
		q.gone.Store(false)
		pendingPool.Put(q)
		return true, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = fmt.Errorf("%w: none within %v", errNoReply, wait)
	}
	q.gone.Store(true) // q stays with the batch; the GC takes it
	return false, err
}

// next ends a send: the queue, if any, goes next on a goroutine of its
// own (the caller has its reply and returns), on the lane just freed.
func (p *pipeliner) next() {
	if batch := p.release(); batch != nil {
		go p.drain(batch)
	}
}

// drain sends batches until the queue is empty.
func (p *pipeliner) drain(batch []*pending) {
	for ; batch != nil; batch = p.release() {
		p.send(batch)
	}
}

// release ends a send: it returns up to maxBatch queued calls to send next
// on the same lane, or frees the lane and returns nil when none queue.
func (p *pipeliner) release() []*pending {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		p.busy--
		return nil
	}
	n := min(len(p.queue), maxBatch)
	batch := p.queue[:n:n]
	if n == len(p.queue) {
		p.queue = nil
	} else {
		p.queue = p.queue[n:]
	}
	return batch
}

// send runs batch's calls as one pipeline (one alone as it is) and wakes
// their callers. Calls whose callers stopped waiting are not sent. A
// call's SET (pending.set) goes just before it.
func (p *pipeliner) send(batch []*pending) {
	cmds := make([]redis.Cmder, 0, len(batch))
	calls := 0
	for _, q := range batch {
		if !q.gone.Load() {
			if q.set != nil {
				cmds = append(cmds, q.set)
			}
			cmds = append(cmds, q.cmd)
			calls++
		}
	}
	// The calls' own contexts are their callers': a batch runs on its own,
	// bounded by the connection's read and write timeouts.
	ctx := context.Background()
	switch len(cmds) {
	case 0:
	case 1:
		_ = p.client.Process(ctx, cmds[0])
	default:
		pipe := p.client.Pipeline()
		for _, c := range cmds {
			_ = pipe.Process(ctx, c)
		}
		_, _ = pipe.Exec(ctx) // each call's error is in its cmd
		if calls > 1 {
			p.batches.Add(1)
			p.pipelined.Add(uint64(calls))
		}
	}
	for _, q := range batch {
		q.done <- struct{}{}
	}
}

// PipelineStats are counts of the calls the store sent in pipelines.
type PipelineStats struct {
	// Batches is the pipelines of two calls or more sent; Calls the calls
	// in them. Calls sent alone are in neither.
	Batches, Calls uint64
}

// PipelineStats returns the store's pipeline counts (zero with
// Options.DirectCalls).
func (s *Store) PipelineStats() PipelineStats {
	if s.pipe == nil {
		return PipelineStats{}
	}
	return PipelineStats{Batches: s.pipe.batches.Load(), Calls: s.pipe.pipelined.Load()}
}
