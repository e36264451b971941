package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/file"
)

func TestParseRetention(t *testing.T) {
	for _, c := range []struct {
		spec string
		ns   string
		ttl  time.Duration
		bad  bool
	}{
		{spec: "team-a=30d", ns: "team-a", ttl: 30 * 24 * time.Hour},
		{spec: "=12h", ns: "", ttl: 12 * time.Hour},
		{spec: "x=90m", ns: "x", ttl: 90 * time.Minute},
		{spec: "x=45s", ns: "x", ttl: 45 * time.Second},
		{spec: "x=1d12h", ns: "x", ttl: 36 * time.Hour},
		{spec: "x", bad: true},
		{spec: "x=", bad: true},
		{spec: "x=0s", bad: true},
		{spec: "x=-1h", bad: true},
		{spec: "x=500ms", bad: true},
		{spec: "x=40000d", bad: true},
		{spec: "x=1.5d", bad: true},
		{spec: "bad/ns=1d", bad: true},
	} {
		ns, ttl, err := storage.ParseRetention(c.spec)
		if c.bad {
			if err == nil {
				t.Errorf("ParseRetention(%q) = %q, %v; want an error", c.spec, ns, ttl)
			}
			continue
		}
		if err != nil || ns != c.ns || ttl != c.ttl {
			t.Errorf("ParseRetention(%q) = %q, %v, %v; want %q, %v", c.spec, ns, ttl, err, c.ns, c.ttl)
		}
	}
}

// racedExpired is a Driver, over a file Store, that writes to each
// expired session after Expired found it and before the sweeper deletes
// it. The sweeper calls only Expired and Delete; the embedded Driver is
// nil.
type racedExpired struct {
	storage.Driver
	st *storage.Store
	t  *testing.T
}

func (s racedExpired) Expired(ctx context.Context, opts storage.ExpiredOptions, yield func(*storage.Session) error) error {
	return s.st.Expired(ctx, opts, func(se *storage.Session) error {
		if _, err := s.st.Update(ctx, storage.UpdateRequest{Ref: storage.Ref{Namespace: se.Namespace, ID: se.ID},
			Fields: storage.UpdateTitle, Title: "touched " + se.Title}); err != nil {
			s.t.Errorf("racing write: %v", err)
		}
		return yield(se)
	})
}

func (s racedExpired) Delete(ctx context.Context, ref storage.Ref, expectedRevision uint64) error {
	return s.st.Delete(ctx, ref, expectedRevision)
}

func (s racedExpired) Close() error { return nil }

func TestSweeper(t *testing.T) {
	ctx := t.Context()
	st, err := file.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	raced := storage.New(racedExpired{st: st, t: t}, storage.Limits{})
	own, err := st.Create(ctx, storage.CreateRequest{Namespace: "a", ExpireAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	byDefault, err := st.Create(ctx, storage.CreateRequest{Namespace: "b"})
	if err != nil {
		t.Fatal(err)
	}
	longer, err := st.Create(ctx, storage.CreateRequest{Namespace: "b", ExpireAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := st.Create(ctx, storage.CreateRequest{Namespace: "c"})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	defaults := map[string]time.Duration{"b": time.Second}
	sw := &storage.Sweeper{Store: st, Defaults: defaults, Log: zap.New(core)}
	if n, err := sw.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("sweep before anything expired: %d, %v", n, err)
	}
	time.Sleep(1100 * time.Millisecond)

	// A write between the look and the delete wins; it also restarts the
	// idle time.
	if n, err := (&storage.Sweeper{Store: raced, Defaults: defaults}).Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("sweep racing a write deleted %d (%v), want none", n, err)
	}
	time.Sleep(1100 * time.Millisecond)
	sub, err := st.Watch(ctx, storage.Ref{Namespace: "a", ID: own.ID}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if n, err := sw.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("sweep deleted %d (%v), want 2", n, err)
	}
	for _, c := range []struct {
		se   *storage.Session
		gone bool
	}{{own, true}, {byDefault, true}, {longer, false}, {kept, false}} {
		_, err := st.Get(ctx, storage.Ref{Namespace: c.se.Namespace, ID: c.se.ID})
		if gone := errors.Is(err, storage.ErrNotFound); gone != c.gone {
			t.Errorf("session in %q with expire_after %v: gone %v (%v), want %v", c.se.Namespace, c.se.ExpireAfter, gone, err, c.gone)
		}
	}
	select {
	case ev := <-sub.Events():
		if ev.Type != storage.EventDeleted {
			t.Errorf("watcher got %v, want EventDeleted", ev.Type)
		}
	case <-time.After(5 * time.Second):
		t.Error("the watcher of an expired session heard nothing")
	}
	if got := logs.FilterMessage("deleted an expired session").Len(); got != 2 {
		t.Errorf("%d deletions logged, want 2", got)
	}
}
