package postgres_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/postgres"
	"github.com/sessiond/sessiond/storage/postgres/pgtest"
)

// TestListReadsAhead: a listing read in pages, the next read while one is
// yielded, yields every session once in list order and honours its limit;
// however it ends early (the caller's error, its cancelled context, a page
// that fails to read), it returns that error and leaves no connection in
// use.
func TestListReadsAhead(t *testing.T) {
	dsn := pgtest.Schema(t)
	ctx := t.Context()
	d, s := openDriver(t, dsn, 4)
	var want []string
	for range 11 {
		se, err := s.Create(ctx, storage.CreateRequest{Namespace: "ns"})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, se.ID)
	}
	slices.Reverse(want) // most recently updated first
	postgres.StopBackground(d)
	list := func(ctx context.Context, opts storage.ListOptions, yield func(*storage.Session) error) ([]string, error) {
		var got []string
		opts.Namespace = "ns"
		err := postgres.ListPaged(ctx, d, opts, 2, 3, func(m *storage.Session) error {
			got = append(got, m.ID)
			return yield(m)
		})
		// The pool closes a connection whose query was cancelled on a
		// goroutine of its own, so it may count as in use for a moment.
		for deadline := time.Now().Add(5 * time.Second); postgres.AcquiredConns(d) != 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d connections still in use 5 s after the listing returned", postgres.AcquiredConns(d))
			}
		}
		return got, err
	}
	next := func(*storage.Session) error { return nil }

	for _, limit := range []int64{0, 2, 5, 11, 12} {
		got, err := list(ctx, storage.ListOptions{Limit: limit}, next)
		w := want
		if limit > 0 && limit < int64(len(w)) {
			w = w[:limit]
		}
		if err != nil || !slices.Equal(got, w) {
			t.Errorf("limit %d: %v (%v), want %v", limit, got, err, w)
		}
	}

	stop := errors.New("stop")
	got, err := list(ctx, storage.ListOptions{}, func(*storage.Session) error { return stop })
	if !errors.Is(err, stop) || len(got) != 1 {
		t.Errorf("yield failing at once: %d yielded, %v; want 1 and its error", len(got), err)
	}

	cctx, cancel := context.WithCancel(ctx)
	got, err = list(cctx, storage.ListOptions{}, func(*storage.Session) error {
		cancel() // the page after this one is being read
		return nil
	})
	if err == nil || len(got) >= len(want) {
		t.Errorf("context cancelled while yielding: %d of %d yielded, %v; want an error before the end", len(got), len(want), err)
	}

	// A page that fails to read ends the listing with its error, after the
	// pages read before it.
	conn := connect(t, dsn)
	got, err = list(ctx, storage.ListOptions{}, func(m *storage.Session) error {
		if m.ID == want[0] {
			_, err := conn.Exec(ctx, "ALTER TABLE sessions RENAME TO sessions_gone")
			return err
		}
		return nil
	})
	if err == nil || len(got) >= len(want) {
		t.Errorf("sessions gone mid-listing: %d of %d yielded, %v; want an error before the end", len(got), len(want), err)
	}
}
