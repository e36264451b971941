package main

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// nofileLimit is the process's descriptor limit (RLIMIT_NOFILE's soft
// value), or 0 when it is unknown or too large to matter.
func nofileLimit() uint64 {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<20 {
		return 0
	}
	return rl.Cur
}

// openJournalsFor is the most journal files the file store may keep open
// under a descriptor limit of nofile (0: unknown): at most half of what is
// left after fdReserveMin, so that connections (autoMaxConnections gives
// them half of the rest) and the operations in progress always find a
// descriptor. At least 1.
func openJournalsFor(requested int, nofile uint64) int {
	if nofile == 0 {
		return requested
	}
	room := (int64(nofile) - fdReserveMin) / 2
	return int(max(min(int64(requested), room), 1))
}

// clampOpenJournals applies openJournalsFor to --max-open-journals, with a
// warning at start when it lowers it: a cache of journals larger than the
// descriptor table fills it, and then every write and connection fails.
func clampOpenJournals(requested int, log *zap.Logger) int {
	nofile := nofileLimit()
	n := openJournalsFor(requested, nofile)
	if n < requested {
		log.Warn("--max-open-journals is more than the descriptor limit allows; clamped",
			zap.Int("max_open_journals", requested), zap.Int("clamped_to", n), zap.Uint64("nofile_limit", nofile),
			zap.String("hint", "raise ulimit -n (systemd: LimitNOFILE) to keep more journals open"))
	}
	return n
}

// spareFD is a descriptor held back so that a listener with no descriptor
// left can still accept a connection in order to close it: a connection
// left in the kernel's backlog would wait for its client's deadline, where
// a closed one is refused at once (the client sees UNAVAILABLE).
type spareFD struct {
	mu sync.Mutex
	f  *os.File
}

func newSpareFD() *spareFD {
	s := &spareFD{}
	s.f, _ = os.Open(os.DevNull)
	return s
}

// refuse accepts one connection from l in the spare descriptor's place and
// closes it, then takes the spare back. It reports whether a connection was
// refused.
func (s *spareFD) refuse(l net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		s.f, _ = os.Open(os.DevNull)
		return false
	}
	_ = s.f.Close()
	s.f = nil
	// The connection accept(2) could not take is waiting; should its client
	// have gone meanwhile, the next one is not to be refused for it.
	if d, ok := l.(interface{ SetDeadline(time.Time) error }); ok {
		_ = d.SetDeadline(time.Now().Add(100 * time.Millisecond))
		defer func() { _ = d.SetDeadline(time.Time{}) }()
	}
	c, err := l.Accept()
	if err == nil {
		_ = c.Close()
	}
	s.f, _ = os.Open(os.DevNull)
	return err == nil
}

// isOutOfFDs reports whether err says the process or system has no file
// descriptor left.
func isOutOfFDs(err error) bool {
	return errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE)
}
