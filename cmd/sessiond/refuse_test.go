package main

import (
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
)

// TestRefusalsBounded: connections over the cap that never speak hold a
// refusal each for refuseTimeout at most, and past maxRefusing of them a
// further one is closed at once; a client that speaks HTTP/2 gets a GOAWAY
// naming the limit.
func TestRefusalsBounded(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newLimitListener(inner, 1, zap.NewNop())
	msg := connLimitMessage(1)
	l.refuse = func(c net.Conn) { refuseGRPC(c, nil, msg) }
	defer l.Close()
	go func() {
		for {
			if _, err := l.Accept(); err != nil {
				return
			}
		}
	}()
	dial := func() net.Conn { return dialTCP(t, inner.Addr().String()) }
	// closedWithin says whether the server closed c within d.
	closedWithin := func(c net.Conn, d time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, err := io.Copy(io.Discard, c)
		return !isTimeout(err)
	}
	dial() // holds the one place

	// A client that speaks HTTP/2 but makes no call gets SETTINGS, then a
	// GOAWAY carrying the message.
	h2 := dial()
	if _, err := h2.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(h2, h2)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// Silent connections take the other refusals.
	silent := make([]net.Conn, maxRefusing-1)
	for i := range silent {
		silent[i] = dial()
	}
	time.Sleep(200 * time.Millisecond) // every one is being refused
	start := time.Now()
	if !closedWithin(dial(), refuseTimeout/2) {
		t.Fatalf("with %d refusals running, one more connection was not closed at once", maxRefusing)
	}

	_ = h2.SetReadDeadline(time.Now().Add(2 * refuseTimeout))
	var away *http2.GoAwayFrame
	for away == nil {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the refusal: %v", err)
		}
		away, _ = f.(*http2.GoAwayFrame)
	}
	if string(away.DebugData()) != msg {
		t.Fatalf("GOAWAY says %q, want %q", away.DebugData(), msg)
	}
	for i, c := range silent {
		if !closedWithin(c, 2*refuseTimeout-time.Since(start)) {
			t.Fatalf("silent connection %d was still open %v after its refusal began", i, 2*refuseTimeout)
		}
	}
}
