package main

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Descriptors kept back from --max-connections' automatic value, for the
// store's journals and the operations in progress: each connection costs
// one descriptor, and a store that finds none left answers UNAVAILABLE.
const (
	fdReserveMin   = 64
	autoConnsLimit = 4096 // the automatic value never goes beyond this
)

// autoMaxConnections is --max-connections when it is 0: half of the
// descriptors the process may open beyond what the store may keep
// (maxOpenJournals, up to half of them) and fdReserveMin, so that
// connections can never starve the store of descriptors; at least 16,
// at most autoConnsLimit.
func autoMaxConnections(maxOpenJournals int) int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<20 {
		return autoConnsLimit
	}
	store := min(uint64(maxOpenJournals), rl.Cur/2)
	free := int64(rl.Cur) - int64(store) - fdReserveMin
	return int(min(max(free/2, 16), autoConnsLimit))
}

// limitListener accepts at most max connections at once. A connection over
// the cap is accepted and closed at once, so that its client sees
// UNAVAILABLE (and may retry elsewhere or later) instead of waiting in the
// kernel's backlog; refusals are logged at most once per logEvery.
type limitListener struct {
	net.Listener
	max    int64
	log    *zap.Logger
	active atomic.Int64

	mu        sync.Mutex // guards refused and lastLog
	refused   int64      // connections refused since the last log line
	lastLog   time.Time
	logEvery  time.Duration
	onRefused func() // for tests: called after each refusal
}

func newLimitListener(l net.Listener, max int, log *zap.Logger) *limitListener {
	return &limitListener{Listener: l, max: int64(max), log: log, logEvery: 10 * time.Second}
}

// Accept returns the next connection within the cap.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.active.Add(1) <= l.max {
			return &limitConn{Conn: c, l: l}, nil
		}
		l.active.Add(-1)
		_ = c.Close()
		l.refusedOne()
	}
}

func (l *limitListener) refusedOne() {
	l.mu.Lock()
	l.refused++
	if now := time.Now(); now.Sub(l.lastLog) >= l.logEvery {
		l.log.Warn("connection limit reached: refusing new connections",
			zap.Int64("max_connections", l.max), zap.Int64("refused", l.refused),
			zap.String("hint", fmt.Sprintf("raise --max-connections (and ulimit -n); repeated at most every %v", l.logEvery)))
		l.refused, l.lastLog = 0, now
	}
	l.mu.Unlock()
	if l.onRefused != nil {
		l.onRefused()
	}
}

// limitConn gives its place back when closed.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.active.Add(-1) })
	return err
}
