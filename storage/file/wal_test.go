package file

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sessiond/sessiond/storage"
)

// walSegments lists the WAL segment files of a data dir.
func walSegments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, walDir, walPref+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCrossSessionGroupCommit: concurrent appends to different sessions
// share WAL flushes, and every one is durable and in order.
func TestCrossSessionGroupCommit(t *testing.T) {
	var mu sync.Mutex
	var recs []storage.FlushRecord
	dir := t.TempDir()
	s := open(t, dir, WithFlushObserver(func(r storage.FlushRecord) {
		mu.Lock()
		recs = append(recs, r)
		mu.Unlock()
	}))
	const writers, each = 16, 10
	sessions := make([]string, writers)
	for i := range sessions {
		sessions[i] = mustCreate(t, s, storage.CreateRequest{}).ID
	}
	// A slow flush, as on a busy disk, makes writers queue behind it.
	s.faultSync = func() error { time.Sleep(2 * time.Millisecond); return nil }
	before := s.stats.journalSyncs.Load()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				mustAppend(t, s, sessions[w], msg(fmt.Sprintf("w%d-%d", w, i), "x"))
			}
		})
	}
	wg.Wait()
	s.faultSync = nil
	syncs := s.stats.journalSyncs.Load() - before
	if syncs >= writers*each/2 {
		t.Errorf("%d appends to %d sessions took %d fdatasyncs; want them to share flushes", writers*each, writers, syncs)
	}
	mu.Lock()
	covered, most := 0, 0
	for _, r := range recs {
		covered += r.Appends
		most = max(most, r.Appends)
	}
	mu.Unlock()
	if covered != writers*each || most < 2 {
		t.Errorf("flush records cover %d appends, at most %d in one; want %d, and some shared", covered, most, writers*each)
	}
	crashed := crashCopy(t, dir)
	// As after a power failure: the journals lost what was not synced; the
	// log has it.
	for _, id := range sessions {
		jp := journalPath(t, crashed, id)
		must(t, os.Truncate(jp, int64(len(encodeJournalHead(1, id)))))
	}
	s2 := open(t, crashed)
	for w, id := range sessions {
		got, err := loadIDs(t, s2, id)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]string, each)
		for i := range want {
			want[i] = fmt.Sprintf("w%d-%d", w, i)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("session %d after a crash (-want +got):\n%s", w, diff)
		}
	}
}

// TestCrashDuringWALFlush cuts the last WAL flush at every byte, in three
// ways (zeros where it did not land, a shorter file, a hole at its start),
// with the journal holding the frame (kill -9: the page cache survives) or
// not (power failure). The append is there whole or not at all, there
// whole when its flush landed whole, and the store stays writable.
func TestCrashDuringWALFlush(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	se := mustCreate(t, s, storage.CreateRequest{Messages: msgs("c", 2)})
	other := mustCreate(t, s, storage.CreateRequest{Messages: msgs("o", 1)})
	mustAppend(t, s, se.ID, msg("a0", "acknowledged"))
	mustAppend(t, s, other.ID, msg("o-a0", "acknowledged"))
	jstart := entryOf(t, s, se.ID).j.tail
	start := s.wal.j.tail
	mustAppend(t, s, se.ID, msg("cut1", strings.Repeat("p", 50)), msg("cut2", "second"))
	end := s.wal.j.tail
	seg := s.wal.j.path
	full, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	// The flush ends in padding (zeros either way): a cut there loses
	// nothing of it.
	whole := end - start - int64(len(full[start:end])-len(trimZeros(full[start:end])))
	base := t.TempDir()
	copyDir(t, dir, base)
	segRel, _ := filepath.Rel(dir, seg)
	jrel, _ := filepath.Rel(dir, journalPath(t, dir, se.ID))
	before := []string{"c0", "c1", "a0"}
	after := append(slices.Clone(before), "cut1", "cut2")
	variants := map[string]func(c int64) []byte{
		"zeros": func(c int64) []byte {
			b := slices.Clone(full)
			clear(b[start+c : end])
			return b
		},
		"truncated": func(c int64) []byte { return slices.Clone(full[:start+c]) },
		"hole": func(c int64) []byte {
			b := slices.Clone(full)
			clear(b[start : start+c])
			return b
		},
	}
	type cutCase struct {
		v         string
		c         int64
		journaled bool
	}
	var cases []cutCase
	for v := range variants {
		for c := int64(0); c <= end-start; c++ {
			if v == "hole" && c == 0 {
				continue
			}
			for _, j := range []bool{false, true} {
				cases = append(cases, cutCase{v, c, j})
			}
		}
	}
	runEach(cases, func(cc cutCase) {
		t.Run(fmt.Sprintf("%s/%d/journaled=%v", cc.v, cc.c, cc.journaled), func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "d")
			copyDir(t, base, d)
			must(t, os.WriteFile(filepath.Join(d, segRel), variants[cc.v](cc.c), filePerm))
			if !cc.journaled {
				must(t, os.Truncate(filepath.Join(d, jrel), jstart))
			}
			// A shorter file lacks the padding a frame is read with.
			landed := (cc.v == "zeros" && cc.c >= whole) || (cc.v == "truncated" && cc.c == end-start)
			s2, err := openPortable(t.Context(), d)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s2.Close()
			got, err := loadIDs(t, s2, se.ID)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			switch {
			case landed && !slices.Equal(got, after):
				t.Fatalf("flush landed whole, got %v; want %v", got, after)
			case !slices.Equal(got, before) && !slices.Equal(got, after):
				t.Fatalf("got %v; want %v or %v", got, before, after)
			case !cc.journaled && cc.c < whole && !slices.Equal(got, before):
				t.Fatalf("an incomplete flush restored the append: got %v", got)
			}
			if o, err := loadIDs(t, s2, other.ID); err != nil || !slices.Equal(o, []string{"o0", "o-a0"}) {
				t.Fatalf("other session: %v, %v", o, err)
			}
			if got2 := appendAndReopen(t, s2, d, se.ID); !slices.Equal(got2, append(got, "after")) {
				t.Fatalf("after a new append and reopen: %v; want %v", got2, append(got, "after"))
			}
			if segs := walSegments(t, d); len(segs) != 0 {
				t.Errorf("after a clean close the log has segments %v", segs)
			}
		})
	})
}

// TestWALDamage: a damaged record in the shared log costs only its session,
// is reported at every open until sessionctl fsck repairs it, and is never
// skipped silently; damage that cannot be attributed is found by fsck.
func TestWALDamage(t *testing.T) {
	for _, where := range []string{"frame", "header"} {
		t.Run(where, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			victim := mustCreate(t, s, storage.CreateRequest{Alias: "victim", Messages: msgs("v", 2)})
			bystander := mustCreate(t, s, storage.CreateRequest{Alias: "bystander", Messages: msgs("b", 2)})
			mustAppend(t, s, victim.ID, msg("v-a0", "before"))
			jstart := entryOf(t, s, victim.ID).j.tail
			start := s.wal.j.tail
			mustAppend(t, s, victim.ID, msg("v-a1", strings.Repeat("lost", 20)))
			mustAppend(t, s, bystander.ID, msg("b-a0", "after the damage"))
			seg := s.wal.j.path
			crashed := crashCopy(t, dir)
			segc := filepath.Join(crashed, walDir, filepath.Base(seg))
			data, err := os.ReadFile(segc)
			if err != nil {
				t.Fatal(err)
			}
			// The batch frame: header (8), type (1), record header (40),
			// journal frame (header 8, payload).
			at := start + frameHeader + 1 + walRecHeader + frameHeader + 20
			if where == "header" {
				at = start + frameHeader + 1 + 12 // the session id
			}
			data[at] ^= 0xff
			must(t, os.WriteFile(segc, data, filePerm))
			// Power failure: the victim's journal lost the change too.
			must(t, os.Truncate(journalPath(t, crashed, victim.ID), jstart))

			rep, err := Check(t.Context(), crashed, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			var walFound, victimFound bool
			for _, f := range rep.Findings {
				walFound = walFound || (f.Kind == KindCorrupt && strings.HasPrefix(f.Path, walDir+"/"))
				victimFound = victimFound || (f.Kind == KindCorrupt && strings.Contains(f.Path, victim.ID))
				if strings.Contains(f.Path, bystander.ID) {
					t.Errorf("finding for the bystander: %+v", f)
				}
			}
			if !walFound || (where == "frame" && !victimFound) {
				t.Fatalf("Check findings %+v; want the log segment corrupt, and the victim when attributable", rep.Findings)
			}

			for range 2 { // at every open, not only the first
				log, logs := observed()
				s2, err := openPortable(t.Context(), crashed, WithLogger(log))
				if err != nil {
					t.Fatal(err)
				}
				if logs.FilterMessageSnippet("write-ahead log segment").Len() == 0 {
					t.Errorf("open logged nothing about the damaged log")
				}
				if got, err := loadIDs(t, s2, bystander.ID); err != nil || !slices.Equal(got, []string{"b0", "b1", "b-a0"}) {
					t.Errorf("bystander: %v, %v", got, err)
				}
				_, err = loadIDs(t, s2, victim.ID)
				if where == "frame" && !errors.Is(err, storage.ErrDataLoss) {
					t.Errorf("victim: %v; want ErrDataLoss", err)
				}
				must(t, s2.Close())
			}

			rep, err = Check(t.Context(), crashed, true, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Damaged() {
				t.Fatal("repair found nothing")
			}
			if rep, err := Check(t.Context(), crashed, false, nil); err != nil || rep.Damaged() {
				t.Fatalf("after repair: %+v, %v", rep, err)
			}
			s3 := open(t, crashed)
			got, err := loadIDs(t, s3, victim.ID)
			if err != nil || !slices.Equal(got, []string{"v0", "v1", "v-a0"}) {
				t.Errorf("victim after repair: %v, %v; want what was intact", got, err)
			}
			if got, err := loadIDs(t, s3, bystander.ID); err != nil || !slices.Equal(got, []string{"b0", "b1", "b-a0"}) {
				t.Errorf("bystander after repair: %v, %v", got, err)
			}
		})
	}
}

// TestWALBounded: the log is retired segment by segment while writes go
// on, so what an open must replay stays bounded; a clean close leaves none.
func TestWALBounded(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, WithWALSegmentBytes(16<<10))
	ids := make([]string, 4)
	for i := range ids {
		ids[i] = mustCreate(t, s, storage.CreateRequest{}).ID
	}
	most := 0
	for i := range 200 {
		mustAppend(t, s, ids[i%len(ids)], msg(fmt.Sprintf("m%d", i), strings.Repeat("x", 512)))
		most = max(most, len(walSegments(t, dir)))
	}
	if most > 1+walMaxSealing {
		t.Errorf("up to %d log segments; want at most %d", most, 1+walMaxSealing)
	}
	crashed := crashCopy(t, dir)
	s2 := open(t, crashed)
	for i, id := range ids {
		got, err := loadIDs(t, s2, id)
		if err != nil || len(got) != 50 || got[0] != fmt.Sprintf("m%d", i) {
			t.Errorf("session %d after a crash: %d messages, %v", i, len(got), err)
		}
	}
	must(t, s2.Close())
	if segs := walSegments(t, crashed); len(segs) != 0 {
		t.Errorf("after a clean close the log has segments %v", segs)
	}
}

// TestWALDeleteRecreate: a session deleted and created again with its id
// before the log is retired never gets the old session's records back.
func TestWALDeleteRecreate(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	id := "0199b6a4-0000-7000-8000-000000000001"
	mustCreate(t, s, storage.CreateRequest{ID: id, Messages: msgs("old", 1)})
	for i := range 3 {
		mustAppend(t, s, id, msg(fmt.Sprintf("old-a%d", i), strings.Repeat("o", 40)))
	}
	if err := s.Delete(t.Context(), storage.Ref{ID: id}, 0); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, storage.CreateRequest{ID: id, Messages: msgs("new", 1)})
	mustAppend(t, s, id, msg("new-a0", "n"))
	s2 := open(t, crashCopy(t, dir))
	got, err := loadIDs(t, s2, id)
	if err != nil || !slices.Equal(got, []string{"new0", "new-a0"}) {
		t.Fatalf("recreated session after a crash: %v, %v", got, err)
	}
}

// TestApplyJournal: the replay compares a journal with the log a window at
// a time, and writes back exactly the records whose bytes differ or are
// missing: within a window, across windows (records more than walReadAhead
// apart), past the end of a short journal, and a record that a later one
// overwrites (the later, in log order, wins).
func TestApplyJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	frame := func(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }
	want := make([]byte, 3*walReadAhead)
	for i := range want {
		want[i] = byte(i % 251)
	}
	recs := []walRec{
		{off: 0, frame: slices.Clone(want[:100])},                                              // present
		{off: 100, frame: frame(1, 50)},                                                        // differs
		{off: 4096, frame: slices.Clone(want[4096:8192])},                                      // present
		{off: 200, frame: frame(5, 10)},                                                        // differs
		{off: 200, frame: slices.Clone(want[200:210])},                                         // what the journal held before the record above: written back
		{off: walReadAhead - 10, frame: slices.Clone(want[walReadAhead-10 : walReadAhead+10])}, // spans two windows, present
		{off: 2*walReadAhead + 5, frame: frame(2, 30)},                                         // next window, differs
		{off: 2*walReadAhead + 5, frame: frame(3, 20)},                                         // overwrites part of the one before
		{off: 3*walReadAhead - 8, frame: frame(4, 16)},                                         // past the end
	}
	disk := slices.Clone(want)
	if err := os.WriteFile(path, disk, 0o600); err != nil {
		t.Fatal(err)
	}
	var st ioStats
	if _, err := applyJournal(path, recs, nil, &st); err != nil {
		t.Fatal(err)
	}
	exp := slices.Clone(want)
	copy(exp[100:], frame(1, 50))
	copy(exp[2*walReadAhead+5:], frame(2, 30))
	copy(exp[2*walReadAhead+5:], frame(3, 20))
	exp = append(exp[:3*walReadAhead-8], frame(4, 16)...)
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, exp) {
		t.Fatalf("journal after replay differs from the log's records applied in order")
	}
	if n := st.bytesWritten.Load(); n != 50+10+10+30+20+16 {
		t.Fatalf("wrote %d bytes, want %d (only the records that differ)", n, 50+10+10+30+20+16)
	}
	// Gone: nothing to do, no error.
	if _, err := applyJournal(filepath.Join(t.TempDir(), "gone"), recs, nil, &st); err != nil {
		t.Fatal(err)
	}
}
