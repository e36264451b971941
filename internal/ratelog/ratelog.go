// Package ratelog logs a condition that persists (a full or read-only disk,
// no file descriptor left) once when it starts, then at most once per
// interval with the count of lines held back, so that a client retrying in
// a loop cannot flood the daemon's log.
package ratelog

import (
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultEvery is the interval New uses when given none.
const DefaultEvery = time.Minute

// Limiter decides, per key, which lines are written. It is safe for
// concurrent use; the zero value is not: use New.
type Limiter struct {
	every time.Duration
	now   func() time.Time // for tests

	mu   sync.Mutex // guards keys
	keys map[string]*state
}

type state struct {
	last       time.Time
	suppressed int64
}

// New returns a Limiter that writes a key's line at most once per every
// (DefaultEvery if every <= 0).
func New(every time.Duration) *Limiter {
	if every <= 0 {
		every = DefaultEvery
	}
	return &Limiter{every: every, now: time.Now, keys: make(map[string]*state)}
}

// Log writes msg at level to log unless a line of the same key was written
// less than the interval ago; a line written after some were held back
// carries their count ("suppressed") and the interval ("repeats_every").
// Keys name conditions ("no space"), not requests: their number must stay
// small.
func (l *Limiter) Log(log *zap.Logger, level zapcore.Level, key, msg string, fields ...zap.Field) {
	l.mu.Lock()
	st := l.keys[key]
	if st == nil {
		st = &state{}
		l.keys[key] = st
	}
	now := l.now()
	if !st.last.IsZero() && now.Sub(st.last) < l.every {
		st.suppressed++
		l.mu.Unlock()
		return
	}
	n := st.suppressed
	st.last, st.suppressed = now, 0
	l.mu.Unlock()
	fields = append(fields, zap.Duration("repeats_every", l.every))
	if n > 0 {
		fields = append(fields, zap.Int64("suppressed", n))
	}
	if ce := log.Check(level, msg); ce != nil {
		ce.Write(fields...)
	}
}
