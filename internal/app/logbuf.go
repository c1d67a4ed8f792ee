package app

import (
	"bufio"
	"io"
	"sync"
	"time"
)

// LogBuffer batches log lines into few writes. One access-log line per
// request would otherwise cost one write system call each, a measurable
// share of a proxied request (bench/). A line waits at most the flush
// interval; Close flushes what is left. Lines are lost only if the process
// dies abruptly, and then at most one interval's worth.
type LogBuffer struct {
	mu   sync.Mutex // protects w
	w    *bufio.Writer
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewLogBuffer buffers up to size bytes for w and flushes every interval.
func NewLogBuffer(w io.Writer, size int, every time.Duration) *LogBuffer {
	b := &LogBuffer{w: bufio.NewWriterSize(w, size), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-t.C:
				b.flush()
			}
		}
	}()
	return b
}

// Write appends one log line; slog writes each record with one call.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

func (b *LogBuffer) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.w.Flush()
}

// Close stops the flusher and flushes. It is idempotent.
func (b *LogBuffer) Close() error {
	b.once.Do(func() {
		close(b.stop)
		<-b.done
		b.flush()
	})
	return nil
}
