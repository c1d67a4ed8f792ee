package app

import (
	"bufio"
	"bytes"
	"io"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/tick"
)

// LogBuffer batches log lines into few writes. One access-log line per
// request would otherwise cost one write system call each, a measurable
// share of a proxied request (bench/). An INFO or DEBUG line waits at most
// the flush interval; a WARN or ERROR line is written before Write returns,
// with every line before it, so the lines that explain a crash are never
// held back. Close flushes what is left (the server's shutdown, a refused
// start, a SIGTERM all end through it). A process killed abruptly (SIGKILL,
// the OOM killer, a panic in a goroutine) loses at most the INFO and DEBUG
// lines of the last interval, never a warning or an error.
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
		tick.Every(b.stop, every, func(time.Time) { b.flush() })
	}()
	return b
}

// Write appends one log line; slog writes each record with one call. A
// WARN or ERROR line (see urgent) is flushed at once, after the lines
// before it.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.w.Write(p)
	if err == nil && urgent(p) {
		err = b.w.Flush()
	}
	return n, err
}

// levelScan is how far into a line its level is looked for: slog's JSON
// and text handlers write it right after the time, so the message and the
// attributes (an access log's header values) are never read for it.
const levelScan = 96

// urgent reports whether a line of slog's JSON or text handler is at WARN
// or ERROR (or above: "ERROR+2"): whether its first levelScan bytes hold
// `"level":"WARN`, `"level":"ERROR`, ` level=WARN` or ` level=ERROR`. It
// looks for "level" once and checks the bytes around each place it is
// found, rather than for each of the four (a quarter of a µs of every
// access-log line, issue 31); TestLogBufferUrgent holds it to the four
// searches.
func urgent(p []byte) bool {
	head := p[:min(len(p), levelScan)]
	for i := 1; i < len(head); {
		j := bytes.Index(head[i:], levelWord)
		if j < 0 {
			return false
		}
		at := i + j // "level" is head[at:at+5]; a match needs a byte before it
		rest := head[at+len(levelWord):]
		switch head[at-1] {
		case '"':
			if bytes.HasPrefix(rest, jsonWarn) || bytes.HasPrefix(rest, jsonError) {
				return true
			}
		case ' ':
			if bytes.HasPrefix(rest, textWarn) || bytes.HasPrefix(rest, textError) {
				return true
			}
		}
		i = at + 1
	}
	return false
}

var (
	levelWord           = []byte("level")
	jsonWarn, jsonError = []byte(`":"WARN`), []byte(`":"ERROR`)
	textWarn, textError = []byte("=WARN"), []byte("=ERROR")
)

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
