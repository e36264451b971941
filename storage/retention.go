package storage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// ParseRetention parses a namespace's default idle time to live, as
// "NAMESPACE=DURATION": the namespace (empty for the default namespace, as
// in "=30d"), then a duration in days ("30d"), in Go's units ("12h",
// "90m", "45s", "1h30m"), or both ("1d12h"). The duration keeps
// ValidateExpireAfter's bounds.
func ParseRetention(spec string) (namespace string, ttl time.Duration, err error) {
	ns, d, ok := strings.Cut(spec, "=")
	if !ok {
		return "", 0, fmt.Errorf("retention %q: want NAMESPACE=DURATION, e.g. team-a=30d (=30d for the default namespace)", spec)
	}
	if err := ValidateNamespace(ns); err != nil {
		return "", 0, fmt.Errorf("retention %q: %w", spec, err)
	}
	ttl, err = ParseDays(d)
	if err != nil {
		return "", 0, fmt.Errorf("retention %q: %w", spec, err)
	}
	if ttl == 0 {
		return "", 0, fmt.Errorf("retention %q: the duration is zero; leave the namespace out to keep its sessions", spec)
	}
	if err := ValidateExpireAfter("duration", ttl); err != nil {
		return "", 0, fmt.Errorf("retention %q: %w", spec, err)
	}
	return ns, ttl, nil
}

// ParseDays parses a duration that may start with a whole number of days:
// "30d", "1d12h", or any time.ParseDuration form ("36h", "90m", "45s").
func ParseDays(s string) (time.Duration, error) {
	var days time.Duration
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil || n < 0 || n > int64(MaxExpireAfter/(24*time.Hour)) {
			return 0, fmt.Errorf("duration %q: want a whole number of days before \"d\", e.g. 30d", s)
		}
		days, s = time.Duration(n)*24*time.Hour, s[i+1:]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: want e.g. 30d, 12h, 90m or 1d12h", s)
	}
	return days + d, nil
}

// Sweeper deletes the sessions of a Store that have not been updated for
// their idle time to live (a session's ExpireAfter, else its namespace's
// default): the daemon's retention. Each deletion names the revision the
// sweeper saw, so a write that lands meanwhile wins and the session stays;
// watchers get EventDeleted as for any delete. Several daemons on one
// database may sweep at once: a session another one deleted is skipped.
type Sweeper struct {
	Store    *Store
	Defaults map[string]time.Duration // by namespace; "" is the default namespace
	Interval time.Duration            // between sweeps; DefaultSweepInterval if 0
	Log      *zap.Logger              // each deletion at info; nil: none
}

// DefaultSweepInterval is how often a Sweeper looks for expired sessions.
const DefaultSweepInterval = time.Minute

// sweepBatch is how many expired sessions one Expired call returns; a
// sweep repeats it until fewer come back.
const sweepBatch = 1000

// Run sweeps every Interval until ctx ends. A failed sweep is logged and
// retried at the next tick.
func (w *Sweeper) Run(ctx context.Context) {
	iv := w.Interval
	if iv <= 0 {
		iv = DefaultSweepInterval
	}
	everyTick(ctx, iv, orNop(w.Log), "retention sweep", func(ctx context.Context) error {
		_, err := w.Sweep(ctx)
		return err
	})
}

// everyTick calls sweep at every tick of interval until ctx ends. A failed
// sweep (what names it) is logged and retried at the next tick.
func everyTick(ctx context.Context, interval time.Duration, log *zap.Logger, what string, sweep func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := sweep(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, ErrClosed) {
			log.Warn(what+" failed; retrying at the next one", zap.Error(err))
		}
	}
}

func orNop(log *zap.Logger) *zap.Logger {
	if log == nil {
		return zap.NewNop()
	}
	return log
}

// Sweep deletes what has expired now and returns how many sessions it
// deleted.
func (w *Sweeper) Sweep(ctx context.Context) (int, error) {
	deleted := 0
	for {
		opts := ExpiredOptions{Now: time.Now().UTC(), Defaults: w.Defaults, Limit: sweepBatch}
		var found []*Session
		if err := w.Store.Expired(ctx, opts, func(s *Session) error {
			found = append(found, s)
			return nil
		}); err != nil {
			return deleted, err
		}
		progress := false
		for _, s := range found {
			err := w.Store.Delete(ctx, Ref{Namespace: s.Namespace, ID: s.ID}, s.Revision)
			switch {
			case err == nil:
				deleted++
				progress = true
				ttl := s.ExpireAfter
				if ttl <= 0 {
					ttl = w.Defaults[s.Namespace]
				}
				orNop(w.Log).Info("deleted an expired session", zap.String("session", s.ID), zap.String("namespace", s.Namespace),
					zap.String("alias", s.Alias), zap.Time("updated_at", s.UpdatedAt), zap.Duration("expire_after", ttl),
					zap.Int64("messages", s.MessageCount))
			case errors.Is(err, ErrConflict), errors.Is(err, ErrNotFound):
				// Written or deleted meanwhile: the write wins.
			default:
				return deleted, err
			}
		}
		if len(found) < sweepBatch || !progress {
			return deleted, nil
		}
	}
}
