package main

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
)

// stallGrace is how long, at shutdown, a connection with no call running
// but an answer not written may go without a read or write making
// progress before it is taken as stalled and closed. A client that still
// reads gets its last answers well within it.
const stallGrace = time.Second

// connTracker knows, for each gRPC connection, the calls running on it,
// when the last one ended, and when its reads or writes last moved bytes.
// GracefulStop waits for every stream to end, and a stream whose client
// stopped reading never ends: its final status is queued in grpc-go behind
// data the flow-control window will not let out, so nothing is written
// after the call ended. Closing just those connections lets the shutdown
// go on, while every other connection is drained with a GOAWAY (an idle
// one, even of a client that answers the GOAWAY's ping late, is left to
// grpc-go: closing it early makes grpc core clients, which share
// connections between channels, fail their next call).
type connTracker struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func newConnTracker() *connTracker {
	return &connTracker{conns: map[*trackedConn]struct{}{}}
}

// listener tracks the connections l accepts.
func (t *connTracker) listener(l net.Listener) net.Listener {
	return &trackedListener{Listener: l, t: t}
}

type trackedListener struct {
	net.Listener
	t *connTracker
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: l.t}
	tc.local = connAddr{Addr: c.LocalAddr(), conn: tc}
	l.t.mu.Lock()
	l.t.conns[tc] = struct{}{}
	l.t.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	t       *connTracker
	local   connAddr
	read    atomic.Int64 // UnixNano of the last read that moved bytes
	written atomic.Int64 // UnixNano of the last write that moved bytes
	ended   atomic.Int64 // UnixNano of when the last call's handler returned
	calls   atomic.Int64
	once    sync.Once
}

// connAddr is a connection's local address carrying the connection: gRPC
// hands it to each call as peer.LocalAddr, so calls are counted against
// the connection they run on, with or without TLS.
type connAddr struct {
	net.Addr
	conn *trackedConn
}

func (c *trackedConn) LocalAddr() net.Addr { return c.local }

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.read.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.written.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return err
}

// serverOptions count the calls running on each connection.
func (t *connTracker) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			c := callConn(ctx)
			c.callStarted()
			defer c.callEnded()
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			c := callConn(ss.Context())
			c.callStarted()
			defer c.callEnded()
			return handler(srv, ss)
		}),
	}
}

// callConn returns the tracked connection a call runs on, or nil when it
// runs on none (an in-process call).
func callConn(ctx context.Context) *trackedConn {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	a, ok := p.LocalAddr.(connAddr)
	if !ok {
		return nil
	}
	return a.conn
}

// callStarted and callEnded count a call against its connection; on a nil
// connection they do nothing.
func (c *trackedConn) callStarted() {
	if c != nil {
		c.calls.Add(1)
	}
}

func (c *trackedConn) callEnded() {
	if c != nil {
		c.ended.Store(time.Now().UnixNano())
		c.calls.Add(-1)
	}
}

// closeStalled runs during a graceful stop, until done is closed: every
// stallGrace/4 it closes the connections that have no call running, have
// moved no byte for stallGrace since the stop began, and either answered
// the stop or have an answer unwritten.
//
// A client that sent anything after the stop began answered its GOAWAY's
// ping, and grpc-go closes such a connection at once when no stream is
// open on it; one still open a stallGrace later with no call running holds
// a finished call whose status waits behind data its client will not read.
// An answer is also unwritten when nothing was written after the last call
// ended, the stop's GOAWAY aside: for a call that ended before the stop,
// what counts is whether anything was written before the stop. That alone
// misses a connection whose queued data went out after its last call
// ended, and it is the only sign from a client that reads nothing at all.
func (t *connTracker) closeStalled(done <-chan struct{}, log *zap.Logger) {
	start := time.Now()
	writtenAtStart := map[*trackedConn]int64{}
	t.mu.Lock()
	for c := range t.conns {
		writtenAtStart[c] = c.written.Load()
	}
	t.mu.Unlock()
	tick := time.NewTicker(stallGrace / 4)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		now := time.Now()
		var stalled []*trackedConn
		t.mu.Lock()
		for c := range t.conns {
			last := time.Unix(0, max(c.read.Load(), c.written.Load(), start.UnixNano()))
			ended := c.ended.Load()
			before, ok := writtenAtStart[c]
			answered := c.read.Load() > start.UnixNano()
			unwritten := ended > c.written.Load() || (ok && ended > before && ended <= start.UnixNano())
			if c.calls.Load() == 0 && (answered || unwritten) && now.Sub(last) >= stallGrace {
				stalled = append(stalled, c)
			}
		}
		t.mu.Unlock()
		for _, c := range stalled {
			_ = c.Close()
		}
		if len(stalled) > 0 {
			log.Info("shutdown: closed connections whose clients stopped reading", zap.Int("connections", len(stalled)))
		}
	}
}
