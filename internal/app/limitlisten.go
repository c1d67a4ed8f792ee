package app

import (
	"net"
	"sync"
)

// limitListener is netutil.LimitListener with a limit that a reload may
// change (max_connections): at the limit, Accept waits until a connection
// closes or the limit rises, so new clients queue in the kernel's accept
// backlog. A lowered limit closes no connection; new ones wait until the
// count is under it.
type limitListener struct {
	net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	limit  int
	open   int
	closed bool
}

func newLimitListener(l net.Listener, n int) *limitListener {
	ll := &limitListener{Listener: l, limit: n}
	ll.cond = sync.NewCond(&ll.mu)
	return ll
}

// SetLimit changes the most connections open at once.
func (l *limitListener) SetLimit(n int) {
	l.mu.Lock()
	l.limit = n
	l.mu.Unlock()
	l.cond.Broadcast()
}

// Limit returns the most connections open at once.
func (l *limitListener) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// Accept waits for a free slot, then for a connection.
func (l *limitListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	for l.open >= l.limit && !l.closed {
		l.cond.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		return nil, net.ErrClosed
	}
	l.open++
	l.mu.Unlock()
	c, err := l.Listener.Accept()
	if err != nil {
		l.release()
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(l.release)}, nil
}

// Close closes the listener and wakes a waiting Accept.
func (l *limitListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cond.Broadcast()
	return l.Listener.Close()
}

func (l *limitListener) release() {
	l.mu.Lock()
	l.open--
	l.mu.Unlock()
	l.cond.Signal()
}

// limitConn gives its slot back when it closes, once.
type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
