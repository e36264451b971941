package file

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sessiond/sessiond/storage"
)

// listedNow returns, per namespace, the encodings by a new countingEncoder
// of what List yields: what a listing that kept nothing would send.
func listedNow(t *testing.T, s *testStore, nss []string) map[string][]string {
	t.Helper()
	fresh := &countingEncoder{}
	out := map[string][]string{}
	for _, ns := range nss {
		err := s.Store.List(t.Context(), storage.ListOptions{Namespace: ns}, func(se *storage.Session) error {
			b, err := fresh.EncodeListed(se)
			out[ns] = append(out[ns], string(b))
			return err
		})
		must(t, err)
	}
	return out
}

// listedEncoded returns, per namespace, what ListEncoded with enc yields.
func listedEncoded(t *testing.T, s *testStore, nss []string, enc storage.ListEncoder) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, ns := range nss {
		err := s.Store.ListEncoded(t.Context(), storage.ListOptions{Namespace: ns}, enc, func(b []byte) error {
			out[ns] = append(out[ns], string(b))
			return nil
		})
		must(t, err)
	}
	return out
}

// WarmListed makes the encoding of every session of every namespace, page
// by page, so that listing afterwards encodes nothing and yields exactly
// what an unwarmed listing does; it skips the encodings already current,
// and the store's Stats count who made them.
func TestWarmListed(t *testing.T) {
	s := openStore(t, t.TempDir())
	s.driver.testHooks().warmPage = 3 // several pages per namespace, and a page boundary inside each
	ctx := t.Context()
	nss := []string{"", "a", "b"}
	var ids []string
	for i, ns := range nss {
		for j := range 4 + 3*i {
			ids = append(ids, mustCreate(t, s, storage.CreateRequest{Namespace: ns, Title: fmt.Sprint(ns, j)}).ID)
		}
	}
	want := listedNow(t, s, nss)

	enc := &countingEncoder{}
	n, err := s.Store.WarmListed(ctx, enc)
	if err != nil || n != len(ids) || enc.calls.Load() != int64(len(ids)) {
		t.Fatalf("WarmListed = %d, %v, encoding %d sessions; want %d, nil, %d", n, err, enc.calls.Load(), len(ids), len(ids))
	}
	got := listedEncoded(t, s, nss, enc)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("listing after the warm-up differs from an unwarmed one (-unwarmed +warmed):\n%s", d)
	}
	if c := enc.calls.Load(); c != int64(len(ids)) {
		t.Fatalf("listings after the warm-up encoded %d sessions, want 0", c-int64(len(ids)))
	}
	stats := func() storage.ListingStats {
		t.Helper()
		st, err := s.driver.Stats(ctx)
		must(t, err)
		return *st.Listing
	}
	if st := stats(); st != (storage.ListingStats{Warmed: uint64(len(ids))}) {
		t.Fatalf("Stats().Listing = %+v, want Warmed %d, Encoded 0", st, len(ids))
	}

	// Nothing changed: nothing to make again.
	if n, err := s.Store.WarmListed(ctx, enc); n != 0 || err != nil {
		t.Fatalf("second WarmListed = %d, %v; want 0, nil", n, err)
	}
	// One write: that session's encoding only.
	_, err = s.Update(ctx, storage.UpdateRequest{Ref: storage.Ref{Namespace: "a", ID: ids[5]}, Fields: storage.UpdateTitle, Title: "renamed"})
	must(t, err)
	if n, err := s.Store.WarmListed(ctx, enc); n != 1 || err != nil {
		t.Fatalf("WarmListed after an update = %d, %v; want 1, nil", n, err)
	}
	if d := cmp.Diff(listedNow(t, s, nss), listedEncoded(t, s, nss, enc)); d != "" {
		t.Fatalf("listing after an update and a warm-up (-unwarmed +warmed):\n%s", d)
	}
	// Another encoder's encodings are not enc's: a listing by enc after a
	// warm-up by other makes its own.
	other := &countingEncoder{}
	if n, err := s.Store.WarmListed(ctx, other); n != len(ids) || err != nil {
		t.Fatalf("WarmListed by another encoder = %d, %v; want %d, nil", n, err, len(ids))
	}
	listedEncoded(t, s, nss, enc)
	if st := stats(); st != (storage.ListingStats{Warmed: uint64(2*len(ids) + 1), Encoded: uint64(len(ids))}) {
		t.Fatalf("Stats().Listing = %+v, want Warmed %d, Encoded %d", st, 2*len(ids)+1, len(ids))
	}

	// A session enc fails on does not stop the others' encodings; the first
	// error, naming the session, is returned.
	bad := &failOn{title: "a2"}
	n, err = s.Store.WarmListed(ctx, bad)
	if n != len(ids)-1 || err == nil || !strings.Contains(err.Error(), ids[6]) || !strings.Contains(err.Error(), "cannot encode") {
		t.Fatalf("WarmListed with a failing session = %d, %v; want %d and the error naming %s", n, err, len(ids)-1, ids[6])
	}

	// It stops when its context ends, and refuses a closed store.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if n, err := s.Store.WarmListed(cctx, &countingEncoder{}); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("WarmListed with an ended context = %d, %v; want 0, context.Canceled", n, err)
	}
	closed := openStore(t, t.TempDir())
	must(t, closed.Close())
	if _, err := closed.Store.WarmListed(ctx, enc); !errors.Is(err, storage.ErrClosed) {
		t.Fatalf("WarmListed on a closed store: %v; want ErrClosed", err)
	}
}

// A warm-up running while sessions are written, and listed, never leaves
// an encoding that a listing would hand out after a write: once the writes
// end, listings equal unwarmed ones, and a warm-up after such a listing has
// nothing left to make. Run with -race.
func TestWarmListedDuringWrites(t *testing.T) {
	s := openStore(t, t.TempDir())
	s.driver.testHooks().warmPage = 4
	ctx := t.Context()
	nss := []string{"", "w"}
	var ids []string
	for i := range 60 {
		ids = append(ids, mustCreate(t, s, storage.CreateRequest{Namespace: nss[i%2], Title: fmt.Sprint("s", i)}).ID)
	}
	enc := &countingEncoder{}
	var wg sync.WaitGroup
	writing := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				k := (w*17 + i*7) % len(ids)
				ref := storage.Ref{Namespace: nss[k%2], ID: ids[k]}
				var err error
				if i%2 == 0 {
					_, err = s.Append(ctx, storage.AppendRequest{Ref: ref, Messages: msgs(fmt.Sprint("w", w, "-", i), 1)})
				} else {
					_, err = s.Update(ctx, storage.UpdateRequest{Ref: ref, Fields: storage.UpdateTitle, Title: fmt.Sprint("t", w, "-", i)})
				}
				if err != nil {
					t.Errorf("write %d of writer %d: %v", i, w, err)
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(writing)
	}()
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { // warm-ups, one after another
		defer readers.Done()
		for {
			if _, err := s.Store.WarmListed(ctx, enc); err != nil {
				t.Errorf("WarmListed during writes: %v", err)
				return
			}
			select {
			case <-writing:
				return
			default:
			}
		}
	}()
	go func() { // listings, meeting the warm-ups
		defer readers.Done()
		for {
			for _, ns := range nss {
				if err := s.Store.ListEncoded(ctx, storage.ListOptions{Namespace: ns}, enc, func([]byte) error { return nil }); err != nil {
					t.Errorf("ListEncoded during writes: %v", err)
					return
				}
			}
			select {
			case <-writing:
				return
			default:
			}
		}
	}()
	readers.Wait()
	if t.Failed() {
		return
	}
	if d := cmp.Diff(listedNow(t, s, nss), listedEncoded(t, s, nss, enc)); d != "" {
		t.Fatalf("listing after writes during warm-ups differs from an unwarmed one (-unwarmed +warmed):\n%s", d)
	}
	// Each session is encoded as it is now by now: nothing left to make.
	if n, err := s.Store.WarmListed(ctx, enc); n != 0 || err != nil {
		t.Fatalf("WarmListed after the listing = %d, %v; want 0, nil", n, err)
	}
	listed := 0
	for _, l := range listedEncoded(t, s, nss, enc) {
		listed += len(l)
	}
	if listed != len(ids) {
		t.Fatalf("listed %d sessions, want %d", listed, len(ids))
	}
}

// failOn fails to encode the session titled title.
type failOn struct {
	countingEncoder
	title string
}

func (f *failOn) EncodeListed(s *storage.Session) ([]byte, error) {
	if s.Title == f.title {
		return nil, errors.New("cannot encode")
	}
	return f.countingEncoder.EncodeListed(s)
}
