package testutil

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Gate forwards loopback TCP connections to a real server (a Redis) and can
// be shut, its listener and every forwarded connection closed, and opened
// again on the same address: the server stopping and starting, as its
// clients see it. It is safe for concurrent use.
type Gate struct {
	t      testing.TB
	target string
	addr   string // fixed by the first listen

	mu    sync.Mutex // protects ln and conns
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup // the accept loops and the pipes
}

// NewGate returns an open Gate to target on a free loopback port. It is
// shut, and its goroutines waited for, when t ends.
func NewGate(t testing.TB, target string) *Gate {
	t.Helper()
	g := &Gate{t: t, target: target, addr: "127.0.0.1:0", conns: map[net.Conn]struct{}{}}
	g.Open()
	t.Cleanup(func() { g.Shut(); g.wg.Wait() })
	return g
}

// Addr is the address clients dial, the same after Shut and Open.
func (g *Gate) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.addr
}

// Open listens on the gate's address again (after Shut) and forwards the
// connections it accepts. Opening an open gate does nothing.
func (g *Gate) Open() {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		g.t.Fatalf("gate: %v", err)
		return
	}
	g.ln, g.addr = ln, ln.Addr().String()
	g.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.wg.Go(func() { g.pipe(c) })
		}
	})
}

// pipe copies between c and a new connection to the target until either
// side closes or the gate shuts.
func (g *Gate) pipe(c net.Conn) {
	up, err := net.DialTimeout("tcp", g.target, 2*time.Second)
	if err != nil {
		c.Close()
		return
	}
	g.mu.Lock()
	if g.ln == nil { // shut meanwhile
		g.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	g.conns[c], g.conns[up] = struct{}{}, struct{}{}
	g.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
	g.mu.Lock()
	delete(g.conns, c)
	delete(g.conns, up)
	g.mu.Unlock()
}

// Shut closes the listener, so that new connections are refused, and every
// forwarded connection. Shutting a shut gate does nothing.
func (g *Gate) Shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln != nil {
		g.ln.Close()
		g.ln = nil
	}
	for c := range g.conns {
		c.Close()
	}
}
