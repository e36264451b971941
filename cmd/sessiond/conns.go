package main

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/sessiond/sessiond/internal/ratelog"
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
	nofile := nofileLimit()
	if nofile == 0 {
		return autoConnsLimit
	}
	store := min(uint64(maxOpenJournals), nofile/2)
	free := int64(nofile) - int64(store) - fdReserveMin
	return int(min(max(free/2, 16), autoConnsLimit))
}

// limitListener accepts at most max connections at once. A connection over
// the cap is accepted and answered by refuse (in a goroutine of its own, at
// most maxRefusing at once), or closed at once without refuse or past
// maxRefusing, so that its client sees UNAVAILABLE (and may retry
// elsewhere or later) instead of waiting in the kernel's backlog; refusals
// are logged at most once per refusalLogEvery.
type limitListener struct {
	net.Listener
	max      int64
	log      *zap.Logger
	active   atomic.Int64
	cond     *ratelog.Limiter
	spare    *spareFD
	refuse   func(net.Conn) // closes the connection when done; nil: close at once
	refusing chan struct{}  // one per refuse running
}

// refusalLogEvery spaces the log lines of refused connections.
const refusalLogEvery = 10 * time.Second

func newLimitListener(l net.Listener, max int, log *zap.Logger) *limitListener {
	return &limitListener{Listener: l, max: int64(max), log: log, cond: ratelog.New(refusalLogEvery), spare: newSpareFD(),
		refusing: make(chan struct{}, maxRefusing)}
}

// Accept returns the next connection within the cap.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if isOutOfFDs(err) && l.spare.refuse(l.Listener) {
			l.cond.Log(l.log, zapcore.WarnLevel, "descriptors", "no file descriptor left: refusing new connections",
				zap.String("hint", "raise ulimit -n, or lower --max-connections or --max-open-journals"))
			continue
		}
		if err != nil {
			return nil, err
		}
		if l.active.Add(1) <= l.max {
			return &limitConn{Conn: c, l: l}, nil
		}
		l.active.Add(-1)
		l.refuseConn(c)
		l.cond.Log(l.log, zapcore.WarnLevel, "connection limit", "connection limit reached: refusing new connections",
			zap.Int64("max_connections", l.max), zap.String("hint", "raise --max-connections (and ulimit -n)"))
	}
}

// refuseConn answers c with refuse if a place is free for it, else closes
// it.
func (l *limitListener) refuseConn(c net.Conn) {
	if l.refuse == nil {
		_ = c.Close()
		return
	}
	select {
	case l.refusing <- struct{}{}:
		go func() {
			defer func() { <-l.refusing }()
			l.refuse(c)
		}()
	default:
		_ = c.Close()
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
