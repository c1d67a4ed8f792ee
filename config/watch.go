package config

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/idemgate/idemgate/internal/filewatch"
)

// WatchOptions configure [Watch]. The zero value is ready to use.
type WatchOptions struct {
	// Debounce is how long the file's directory must stay quiet after a
	// change before the file is read, so that a write in several steps is
	// read once, whole. A change is read at most 10×Debounce after it
	// started, however busy the directory. Default 250ms.
	Debounce time.Duration
	// Poll is how often the file is read whatever the events say: it
	// catches changes that file events miss (network file systems, a lost
	// event). Default 30s; negative disables polling.
	Poll time.Duration
	// Reload forces a read on every receive, even when the content did not
	// change (SIGHUP). Nil: none.
	Reload <-chan struct{}
	// Logger receives the watcher's own trouble (events unavailable, a
	// directory that cannot be watched). Default: discard.
	Logger *slog.Logger
}

// Watch watches the configuration file at path until ctx ends, and calls
// fn with the file's content each time it changes: once at the start (so
// that a change made between the caller's first load and the watch is not
// missed), then after every change, and on every receive from
// o.Reload. Content that did not change since the last call is not
// delivered again (except on Reload). When the file cannot be read, fn gets
// the error, once until the file can be read again. fn runs on Watch's
// goroutine, one call at a time.
//
// Watch follows the ways a file is replaced, not only written: it watches
// the file's directory and the directory of the file its symbolic links
// resolve to, and resolves them again after every change. So it sees a
// write in place, a new file renamed over the old one (what editors and
// `kubectl cp` do), and a Kubernetes ConfigMap update, where the mounted
// file is a symbolic link through ..data and the kubelet swaps ..data to a
// new timestamped directory. (A ConfigMap mounted with subPath never
// changes; the periodic poll then finds nothing either.) It never uses
// viper's WatchConfig, which delivers unparsable files, races with
// readers and cannot be stopped (ecosystem.md §3.3).
//
// If file events cannot be had (the inotify limit), Watch logs it and
// polls. It returns nil when ctx ends.
func Watch(ctx context.Context, path string, o WatchOptions, fn func(data []byte, err error)) error {
	if o.Debounce <= 0 {
		o.Debounce = 250 * time.Millisecond
	}
	if o.Poll == 0 {
		o.Poll = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	fw := &fileWatch{path: abs, log: o.Logger, fn: fn, watched: map[string]bool{}}
	if w, err := fsnotify.NewWatcher(); err != nil {
		interval := o.Poll
		if interval < 0 {
			interval = 30 * time.Second
			o.Poll = interval
		}
		o.Logger.Warn("config file events unavailable; polling instead", "error", err, "every", interval.String())
	} else {
		fw.w = w
		defer w.Close()
		fw.rewatch()
	}
	fw.read(false)

	filewatch.Loop{
		Watcher:  fw.w,
		Relevant: fw.relevant,
		Debounce: o.Debounce,
		MaxDelay: 10 * o.Debounce,
		Poll:     o.Poll,
		Force:    o.Reload,
		Changed: func(forced bool) {
			fw.rewatch()
			fw.read(forced)
		},
		Error: func(err error) { o.Logger.Warn("config file watch", "error", err) },
	}.Run(ctx.Done())
	return nil
}

// fileWatch is Watch's state; only Watch's goroutine touches it.
type fileWatch struct {
	path    string
	log     *slog.Logger
	fn      func([]byte, error)
	w       *fsnotify.Watcher // nil: polling only
	watched map[string]bool   // directories watched
	real    string            // the file the path resolved to last
	sum     [sha256.Size]byte // of the content delivered last
	have    bool              // sum is set
	lastErr string            // the read error delivered last
}

// rewatch watches the directories of the path and of the file it resolves
// to now, and stops watching those it no longer needs (a ConfigMap's old
// timestamped directory, which the kubelet deletes).
func (fw *fileWatch) rewatch() {
	if fw.w == nil {
		return
	}
	want := map[string]bool{filepath.Dir(fw.path): true}
	if real, err := filepath.EvalSymlinks(fw.path); err == nil {
		fw.real = real
		want[filepath.Dir(real)] = true
	}
	for d := range want {
		if fw.watched[d] {
			continue
		}
		if err := fw.w.Add(d); err != nil {
			fw.log.Warn("cannot watch the config file's directory; changes are found by polling", "dir", d, "error", err)
			continue
		}
		fw.watched[d] = true
	}
	for d := range fw.watched {
		if !want[d] {
			fw.w.Remove(d) // fails harmlessly when the directory is gone
			delete(fw.watched, d)
		}
	}
}

// relevant reports whether an event's file may change what the path reads:
// the file itself, the file it resolves to, or the kubelet's ..data,
// ..data_tmp and ..<timestamp> entries.
func (fw *fileWatch) relevant(name string) bool {
	base := filepath.Base(name)
	return base == filepath.Base(fw.path) ||
		fw.real != "" && base == filepath.Base(fw.real) ||
		strings.HasPrefix(base, "..")
}

// read reads the file and delivers it if it changed (or when force).
func (fw *fileWatch) read(force bool) {
	data, err := os.ReadFile(fw.path)
	if err != nil {
		if msg := err.Error(); force || msg != fw.lastErr {
			fw.lastErr = msg
			fw.fn(nil, err)
		}
		return
	}
	fw.lastErr = ""
	sum := sha256.Sum256(data)
	if fw.have && sum == fw.sum && !force {
		return
	}
	fw.sum, fw.have = sum, true
	fw.fn(data, nil)
}
