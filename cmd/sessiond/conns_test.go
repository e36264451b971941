package main

import (
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestLimitListener: a connection over the cap is closed at once and logged
// once (then held back); closing an accepted one gives its place back.
func TestLimitListener(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	l := newLimitListener(inner, 1, zap.New(core))
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn { return dialTCP(t, inner.Addr().String()) }
	closedByServer := func(c net.Conn) bool {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err != nil && !isTimeout(err)
	}
	dial()
	first := <-accepted
	for range 2 {
		if c := dial(); !closedByServer(c) {
			t.Fatal("a connection over the cap was not closed")
		}
	}
	if n := logs.FilterMessage("connection limit reached: refusing new connections").Len(); n != 1 {
		t.Fatalf("%d refusal log lines, want 1 (the second held back)", n)
	}
	_ = first.Close()
	dial()
	select {
	case c := <-accepted:
		_ = c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("closing an accepted connection did not give its place back")
	}
}

// dialTCP connects to addr, closing the connection when the test ends.
func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
