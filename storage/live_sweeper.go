package storage

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// DefaultStreamIdleTimeout is how long an open message may go without a
// delta before the daemon closes it as MESSAGE_STATE_INTERRUPTED.
const DefaultStreamIdleTimeout = 2 * time.Minute

// StreamSweeper closes the open messages of a Store whose session has not
// changed for IdleTimeout (Store.InterruptIdle), so that a writer that
// crashed or lost its connection leaves an interrupted turn, text kept,
// rather than one open for ever.
type StreamSweeper struct {
	Store       *Store
	IdleTimeout time.Duration // DefaultStreamIdleTimeout if 0
	Log         *zap.Logger   // nil: none
}

// Run sweeps until ctx ends, every quarter of IdleTimeout (at most every
// second), so that a message is closed at most a quarter late.
func (w *StreamSweeper) Run(ctx context.Context) {
	idle := w.IdleTimeout
	if idle <= 0 {
		idle = DefaultStreamIdleTimeout
	}
	log := orNop(w.Log)
	everyTick(ctx, max(idle/4, time.Second), log, "stream idle sweep", func(ctx context.Context) error {
		n, err := w.Store.InterruptIdle(ctx, time.Now().Add(-idle))
		if n > 0 {
			log.Info("interrupted idle open messages", zap.Int("messages", n), zap.Duration("idle_timeout", idle))
		}
		return err
	})
}
