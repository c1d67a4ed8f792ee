package testutil

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer is a loopback server that sends every line back.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { defer c.Close(); io.Copy(c, c) })
		}
	})
	return ln.Addr().String()
}

// roundTrip sends a line on c and reads it back.
func roundTrip(c net.Conn) error {
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err == nil && line != "ping\n" {
		err = errors.New("echoed " + line)
	}
	return err
}

// A Gate forwards while open; shut, it refuses new connections and has
// closed the forwarded ones; opened again, it forwards on the same address.
func TestGate(t *testing.T) {
	t.Parallel()
	g := NewGate(t, echoServer(t))
	addr := g.Addr()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c); err != nil {
		t.Fatalf("through the open gate: %v", err)
	}
	g.Shut()
	if err := roundTrip(c); err == nil {
		t.Error("a connection forwarded before Shut still works after it")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("a shut gate accepted a connection")
	}
	g.Open()
	if g.Addr() != addr {
		t.Errorf("reopened on %s; want %s", g.Addr(), addr)
	}
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := roundTrip(c2); err != nil {
		t.Errorf("through the reopened gate: %v", err)
	}
}
