package storage_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sessiond/sessiond/storage"
)

// blockingDriver is a Driver whose Get of alias "block" waits for release,
// and which records its Close. Methods it does not define are never called.
type blockingDriver struct {
	storage.Driver
	entered chan struct{}
	release chan struct{}
	gets    atomic.Int64
	closed  atomic.Bool
}

func (d *blockingDriver) Get(_ context.Context, ref storage.Ref) (*storage.Session, error) {
	d.gets.Add(1)
	if ref.Alias != "block" {
		return &storage.Session{ID: testID}, nil
	}
	d.entered <- struct{}{}
	<-d.release
	if d.closed.Load() {
		return nil, errors.New("driver closed under a call in progress")
	}
	return &storage.Session{ID: "x"}, nil
}

func (d *blockingDriver) Close() error {
	d.closed.Store(true)
	return nil
}

const testID = "0190a2b4-7c3d-7e5f-8a9b-0c1d2e3f4a5b"

// Close lets a call in progress finish before it closes the driver, and
// every call after Close answers ErrClosed without reaching the driver.
func TestStoreCloseDrainsCalls(t *testing.T) {
	d := &blockingDriver{entered: make(chan struct{}), release: make(chan struct{})}
	s := storage.New(d, storage.Limits{})
	got := make(chan error, 1)
	go func() {
		_, err := s.Get(t.Context(), storage.Ref{Alias: "block"})
		got <- err
	}()
	<-d.entered
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close has begun once new calls are refused.
	for {
		_, err := s.Get(t.Context(), storage.Ref{ID: testID})
		if errors.Is(err, storage.ErrClosed) {
			break
		}
		if err != nil {
			t.Fatalf("Get before Close began: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) with a call in progress", err)
	case <-time.After(50 * time.Millisecond):
	}
	if d.closed.Load() {
		t.Fatal("driver closed with a call in progress")
	}
	close(d.release)
	if err := <-got; err != nil {
		t.Fatalf("call in progress: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !d.closed.Load() {
		t.Fatal("Close did not close the driver")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v, want the first's result", err)
	}
	n := d.gets.Load()
	if _, err := s.Get(t.Context(), storage.Ref{ID: testID}); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
	if d.gets.Load() != n {
		t.Fatal("a call after Close reached the driver")
	}
}

// A call whose context has ended returns its error before the driver sees
// it.
func TestStoreChecksContextFirst(t *testing.T) {
	d := &blockingDriver{entered: make(chan struct{}), release: make(chan struct{})}
	s := storage.New(d, storage.Limits{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Get(ctx, storage.Ref{ID: testID}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with an ended context: %v, want context.Canceled", err)
	}
	if _, err := s.Create(ctx, storage.CreateRequest{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with an ended context: %v, want context.Canceled", err)
	}
	if d.gets.Load() != 0 {
		t.Fatal("the driver saw a call whose context had ended")
	}
}

// pingDriver answers Ping with err and keeps no statistics; it implements
// nothing else (the embedded Driver is nil).
type pingDriver struct {
	storage.Driver
	err error
}

func (d pingDriver) Ping(context.Context) error { return d.err }

func (d pingDriver) Close() error { return nil }

// Stats and Ping reach the Driver's optional interfaces: a Driver without
// statistics answers ErrUnsupported, one without Ping is always
// reachable, and both answer ErrClosed after Close.
func TestStoreStatsAndPing(t *testing.T) {
	down := fmt.Errorf("database down: %w", storage.ErrUnavailable)
	s := storage.New(pingDriver{err: down}, storage.Limits{})
	if _, err := s.Stats(t.Context()); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Stats of a Driver without statistics = %v, want ErrUnsupported", err)
	}
	if err := s.Ping(t.Context()); !errors.Is(err, storage.ErrUnavailable) {
		t.Errorf("Ping = %v, want the Driver's ErrUnavailable", err)
	}
	noPing := storage.New(&blockingDriver{}, storage.Limits{})
	if err := noPing.Ping(t.Context()); err != nil {
		t.Errorf("Ping of a Driver without Ping = %v, want nil", err)
	}
	for _, st := range []*storage.Store{s, noPing} {
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.Ping(t.Context()); !errors.Is(err, storage.ErrClosed) {
			t.Errorf("Ping after Close = %v, want ErrClosed", err)
		}
	}
	if _, err := s.Stats(t.Context()); !errors.Is(err, storage.ErrClosed) {
		t.Errorf("Stats after Close = %v, want ErrClosed", err)
	}
}
