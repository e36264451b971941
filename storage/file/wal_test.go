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
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

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
	observe, flushes := recordFlushes()
	dir := t.TempDir()
	s := open(t, dir, observe)
	const writers, each = 16, 10
	sessions := createSessions(t, s, writers)
	// A slow flush, as on a busy disk, makes writers queue behind it.
	s.testHooks().sync = func() error { time.Sleep(2 * time.Millisecond); return nil }
	before := s.stats.journalSyncs.Load()
	appendInLoops(t, s, sessions, each)
	s.testHooks().sync = nil
	syncs := s.stats.journalSyncs.Load() - before
	if syncs >= writers*each/2 {
		t.Errorf("%d appends to %d sessions took %d fdatasyncs; want them to share flushes", writers*each, writers, syncs)
	}
	covered, most := 0, 0
	for _, r := range flushes() {
		covered += r.Appends
		most = max(most, r.Appends)
	}
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

// toRecycled appends to a filler session of s, opened with small log
// segments, until a flush starts a segment in a spare: the current segment
// then holds its file's earlier batches past its tail.
func toRecycled(t *testing.T, s *testStore) {
	t.Helper()
	filler := mustCreate(t, s, storage.CreateRequest{}).ID
	r0 := s.stats.walRecycled.Load()
	for i := 0; s.stats.walRecycled.Load() == r0; i++ {
		if i == 1000 {
			t.Fatal("no spare segment reused after 1,000 appends")
		}
		mustAppend(t, s, filler, msg(fmt.Sprintf("f%d", i), strings.Repeat("f", 512)))
	}
}

// TestCrashDuringWALFlush cuts the last WAL flush at every byte, in a new
// segment file in three ways (zeros where it did not land, a shorter file,
// a hole at its start) and in a reused one (a spare: its earlier batches
// where it did not land, or at its start), with the journal holding the
// frame (kill -9: the page cache survives) or not (power failure). The
// append is there whole or not at all, there whole when its flush landed
// whole; no damage is reported (fsck finds at most the incomplete flush),
// and the store stays writable.
func TestCrashDuringWALFlush(t *testing.T) {
	for _, recycled := range []bool{false, true} {
		t.Run(map[bool]string{false: "new", true: "recycled"}[recycled], func(t *testing.T) {
			testCrashDuringWALFlush(t, recycled)
		})
	}
}

func testCrashDuringWALFlush(t *testing.T, recycled bool) {
	dir := t.TempDir()
	s := open(t, dir, WithWALSegmentBytes(16<<10))
	se := mustCreate(t, s, storage.CreateRequest{Messages: msgs("c", 2)})
	other := mustCreate(t, s, storage.CreateRequest{Messages: msgs("o", 1)})
	if recycled {
		toRecycled(t, s)
	}
	mustAppend(t, s, se.ID, msg("a0", "acknowledged"))
	mustAppend(t, s, other.ID, msg("o-a0", "acknowledged"))
	jstart := entryOf(t, s, se.ID).j.tail
	start := s.wal.j.tail
	seg := s.wal.j.path
	prev, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, se.ID, msg("cut1", strings.Repeat("p", 50)), msg("cut2", "second"))
	end := s.wal.j.tail
	if s.wal.j.path != seg {
		t.Fatal("the flush started a new segment")
	}
	full, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	// The flush wrote its batch and the end mark after it.
	written := end - start + walEndMark
	if int64(len(prev)) < start+written {
		prev = append(prev, make([]byte, start+written-int64(len(prev)))...)
	}
	if stale := prev[start : start+written]; recycled == allZero(stale) {
		t.Fatalf("recycled=%v, but the bytes the flush overwrote are all zero=%v", recycled, allZero(stale))
	}
	base := t.TempDir()
	copyDir(t, dir, base)
	segRel, _ := filepath.Rel(dir, seg)
	jrel, _ := filepath.Rel(dir, journalPath(t, dir, se.ID))
	before := []string{"c0", "c1", "a0"}
	after := append(slices.Clone(before), "cut1", "cut2")
	// Each variant is what the segment holds when the flush landed up to
	// (or, for a hole, from) byte c of what it wrote: the bytes it did not
	// overwrite are the file's earlier ones (zeros in a new file).
	variants := map[string]func(c int64) []byte{
		"unlanded": func(c int64) []byte {
			b := slices.Clone(full)
			copy(b[start+c:start+written], prev[start+c:start+written])
			return b
		},
		"hole": func(c int64) []byte {
			b := slices.Clone(full)
			copy(b[start:start+c], prev[start:start+c])
			return b
		},
	}
	if !recycled {
		// A new file can also be shorter than the write.
		variants["truncated"] = func(c int64) []byte { return slices.Clone(full[:start+c]) }
	}
	type cutCase struct {
		v         string
		c         int64
		journaled bool
	}
	var cases []cutCase
	for v := range variants {
		for c := int64(0); c <= written; c++ {
			if (v == "hole" && c == 0) || (v == "truncated" && c > end-start) {
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
			data := variants[cc.v](cc.c)
			must(t, os.WriteFile(filepath.Join(d, segRel), data, filePerm))
			if !cc.journaled {
				must(t, os.Truncate(filepath.Join(d, jrel), jstart))
			}
			// The batch is whole when its bytes and padding are; a
			// shorter file lacks the padding a frame is read with.
			landed := int64(len(data)) >= end && slices.Equal(data[start:end], full[start:end])
			rep, err := Check(t.Context(), d, false, nil)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			for _, f := range rep.Findings {
				if f.Kind != KindTruncated || f.Path != segRel {
					t.Errorf("Check finding %+v; want at most the incomplete flush", f)
				}
			}
			log, logs := observed()
			s2, err := openPortable(t.Context(), d, WithLogger(log))
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s2.Close()
			if errs := logs.FilterLevelExact(zapcore.ErrorLevel); errs.Len() > 0 {
				t.Errorf("open logged errors: %v", errs.All())
			}
			got, err := loadIDs(t, s2, se.ID)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			switch {
			case landed && !slices.Equal(got, after):
				t.Fatalf("flush landed whole, got %v; want %v", got, after)
			case !slices.Equal(got, before) && !slices.Equal(got, after):
				t.Fatalf("got %v; want %v or %v", got, before, after)
			case !cc.journaled && !landed && !slices.Equal(got, before):
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
// skipped silently; damage that cannot be attributed is found by fsck. So
// in a segment that reuses a spare, whose earlier batches follow the live
// ones.
func TestWALDamage(t *testing.T) {
	for _, tc := range []struct {
		where    string
		recycled bool
	}{{"frame", false}, {"header", false}, {"frame", true}, {"header", true}} {
		where := tc.where
		t.Run(fmt.Sprintf("%s/recycled=%v", where, tc.recycled), func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, WithWALSegmentBytes(16<<10))
			if tc.recycled {
				toRecycled(t, s)
			}
			victim := mustCreate(t, s, storage.CreateRequest{Alias: "victim", Messages: msgs("v", 2)})
			bystander := mustCreate(t, s, storage.CreateRequest{Alias: "bystander", Messages: msgs("b", 2)})
			mustAppend(t, s, victim.ID, msg("v-a0", "before"))
			jstart := entryOf(t, s, victim.ID).j.tail
			start := s.wal.j.tail
			seg := s.wal.j.path
			mustAppend(t, s, victim.ID, msg("v-a1", strings.Repeat("lost", 20)))
			mustAppend(t, s, bystander.ID, msg("b-a0", "after the damage"))
			if s.wal.j.path != seg {
				t.Fatal("the flushes started a new segment")
			}
			crashed := crashCopy(t, dir)
			segc := filepath.Join(crashed, walDir, filepath.Base(seg))
			data, err := os.ReadFile(segc)
			if err != nil {
				t.Fatal(err)
			}
			// The batch frame: header (8), type and segment (walBatchHead),
			// record header (40), journal frame (header 8, payload).
			at := start + frameHeader + walBatchHead + walRecHeader + frameHeader + 20
			if where == "header" {
				at = start + frameHeader + walBatchHead + 12 // the session id
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

// walMaxSegments bounds the log while checkpoints keep up: the current
// segment, those waiting for the sealer, and the synced ones waiting for
// the checkpoint they ask for.
const walMaxSegments = 1 + walMaxSealing + walMaxUncovered

// smallSegments opens dir with 16 KiB log segments and creates n sessions.
func smallSegments(t *testing.T, dir string, n int) (*testStore, []string) {
	t.Helper()
	s := open(t, dir, WithWALSegmentBytes(16<<10))
	ids := make([]string, n)
	for i := range ids {
		ids[i] = mustCreate(t, s, storage.CreateRequest{}).ID
	}
	return s, ids
}

// TestWALBounded: the log is retired segment by segment while writes go
// on, so what an open must replay stays bounded; a clean close leaves none.
func TestWALBounded(t *testing.T) {
	dir := t.TempDir()
	s, ids := smallSegments(t, dir, 4)
	most := 0
	for i := range 200 {
		mustAppend(t, s, ids[i%len(ids)], msg(fmt.Sprintf("m%d", i), strings.Repeat("x", 512)))
		most = max(most, len(walSegments(t, dir)))
	}
	if most > walMaxSegments {
		t.Errorf("up to %d log segments; want at most %d", most, walMaxSegments)
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

// walFiles counts a data dir's log segments and spares.
func walFiles(t *testing.T, dir string) (segs, spares int) {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, walDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		switch {
		case strings.HasPrefix(de.Name(), walPref):
			segs++
		case strings.HasPrefix(de.Name(), walFreePref):
			spares++
		}
	}
	return segs, spares
}

// TestWALRecycles: retired segments are kept as spares, at most
// walMaxSpares, and new segments start in them, so that a long run creates
// at most walMaxSegments segment files; a clean close keeps the spares
// (which fsck does not report), and the next run starts in one.
func TestWALRecycles(t *testing.T) {
	dir := t.TempDir()
	s, ids := smallSegments(t, dir, 4)
	const n = 300
	for i := range n {
		mustAppend(t, s, ids[i%len(ids)], msg(fmt.Sprintf("m%d", i), strings.Repeat("x", 512)))
		if segs, spares := walFiles(t, dir); segs > walMaxSegments || spares > walMaxSpares {
			t.Fatalf("after append %d: %d segments and %d spares; want at most %d and %d", i, segs, spares, walMaxSegments, walMaxSpares)
		}
	}
	st, err := s.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	created, recycled := st.WAL.Created, st.WAL.Recycled
	if created+recycled < 8 {
		t.Fatalf("%d segments started; the test wants at least 8", created+recycled)
	}
	if created > walMaxSegments {
		t.Errorf("%d segment files created, %d spares reused; want at most %d created", created, recycled, walMaxSegments)
	}
	// After a crash, the live segments are read past their reused files'
	// earlier batches.
	s2 := open(t, crashCopy(t, dir))
	for i, id := range ids {
		got, err := loadIDs(t, s2, id)
		if err != nil || len(got) != n/len(ids) || got[0] != fmt.Sprintf("m%d", i) || got[len(got)-1] != fmt.Sprintf("m%d", n-len(ids)+i) {
			t.Errorf("session %d after a crash: %d messages, %v", i, len(got), err)
		}
	}
	must(t, s2.Close())

	must(t, s.Close())
	if segs, spares := walFiles(t, dir); segs != 0 || spares == 0 || spares > walMaxSpares {
		t.Errorf("after a clean close: %d segments, %d spares; want none and 1 to %d", segs, spares, walMaxSpares)
	}
	if rep, err := Check(t.Context(), dir, false, nil); err != nil || rep.Damaged() {
		t.Fatalf("Check after a clean close: %+v, %v", rep, err)
	}
	s3 := open(t, dir, WithWALSegmentBytes(16<<10))
	mustAppend(t, s3, ids[0], msg("next", "run"))
	if created, recycled := s3.stats.walCreated.Load(), s3.stats.walRecycled.Load(); created != 0 || recycled != 1 {
		t.Errorf("the next run created %d segment files and reused %d spares; want 0 and 1", created, recycled)
	}
	must(t, s3.Close())
	s4 := open(t, dir)
	if got, err := loadIDs(t, s4, ids[0]); err != nil || len(got) != n/len(ids)+1 || got[len(got)-1] != "next" {
		t.Errorf("after reopening: %d messages, %v", len(got), err)
	}
}

// TestCrashDuringWALRecycle copies the data dir, as kill -9 leaves it, at
// every step of retiring a segment into a spare (journals synced; renamed,
// the folder not yet synced) and of starting a segment in a spare (header
// written and synced, not renamed; renamed, the folder not yet synced),
// and at Close. Each copy opens with every acknowledged append, reports
// nothing to fsck and logs no error. A power failure at a step leaves the
// state of the step before it (a rename not yet durable) or of the step
// itself; what a journal loses then, the log holds (TestCrashDuringWALFlush).
func TestCrashDuringWALRecycle(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, WithWALSegmentBytes(16<<10), WithCheckpoints(time.Hour, 1<<20))
	ids := []string{mustCreate(t, s, storage.CreateRequest{}).ID, mustCreate(t, s, storage.CreateRequest{}).ID}
	var all [2][]string // the messages appended to each session, in order
	type crash struct {
		step  string
		dir   string
		acked [2]int
	}
	var crashes []crash
	var acked [2]int
	seen := map[string]int{}
	// Only this goroutine writes, and it waits for the sealer after each
	// append, so nothing else changes the files while a copy is taken:
	// the leader's steps run inside its append, the sealer's while it waits.
	var mu sync.Mutex
	s.testHooks().walStep = func(step string) {
		mu.Lock()
		defer mu.Unlock()
		if seen[step] >= 2 {
			return
		}
		seen[step]++
		d := filepath.Join(t.TempDir(), "d")
		copyDir(t, dir, d)
		crashes = append(crashes, crash{step: step, dir: d, acked: acked})
	}
	sealed := func() bool {
		s.wal.sealMu.Lock()
		defer s.wal.sealMu.Unlock()
		return len(s.wal.pending) == 0
	}
	for i := range 200 {
		k := i % 2
		id := fmt.Sprintf("m%d", i)
		all[k] = append(all[k], id)
		mustAppend(t, s, ids[k], msg(id, strings.Repeat("x", 512)))
		mu.Lock()
		acked[k]++
		mu.Unlock()
		for !sealed() {
			time.Sleep(time.Millisecond)
		}
	}
	must(t, s.Close())
	s.testHooks().walStep = nil
	for _, step := range []string{"header", "renamed", "sealed", "kept"} {
		if seen[step] == 0 {
			t.Errorf("no crash at step %q (steps seen: %v)", step, seen)
		}
	}
	for _, c := range crashes {
		t.Run(fmt.Sprintf("%s/%d-%d", c.step, c.acked[0], c.acked[1]), func(t *testing.T) {
			if rep, err := Check(t.Context(), c.dir, false, nil); err != nil || rep.Damaged() {
				t.Fatalf("Check: %+v, %v", rep, err)
			}
			log, logs := observed()
			s2, err := openPortable(t.Context(), c.dir, WithLogger(log))
			if err != nil {
				t.Fatal(err)
			}
			defer s2.Close()
			if bad := logs.FilterLevelExact(zapcore.ErrorLevel).Len() + logs.FilterMessageSnippet("incomplete").Len(); bad > 0 {
				t.Errorf("open logged damage or an incomplete flush: %v", logs.All())
			}
			for k, id := range ids {
				got, err := loadIDs(t, s2, id)
				// The append in progress at the step may be there too.
				if err != nil || len(got) < c.acked[k] || len(got) > c.acked[k]+1 || !slices.Equal(got, all[k][:len(got)]) {
					t.Errorf("session %d: %v, %v; want the first %d (or one more) of %v", k, got, err, c.acked[k], all[k])
				}
			}
		})
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

// TestApplyJournalFaultClosesFile: a record whose mapped segment faults
// (here: the segment was cut under its mapping) fails the replay with an
// I/O error, and the journal's file is closed all the same.
func TestApplyJournalFaultClosesFile(t *testing.T) {
	dir := t.TempDir()
	seg, path := filepath.Join(dir, "segment"), filepath.Join(dir, "journal")
	if err := os.WriteFile(seg, bytes.Repeat([]byte{7}, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	data, unmap, err := mapSegment(seg)
	if err != nil {
		t.Fatal(err)
	}
	if unmap == nil {
		t.Skip("this file system cannot map files")
	}
	defer unmap()
	if err := os.Truncate(seg, 0); err != nil {
		t.Fatal(err)
	}
	// The journal holds bytes where the record goes, so that the replay
	// compares them with the record's: that read of the mapping faults.
	if err := os.WriteFile(path, make([]byte, 200), 0o600); err != nil {
		t.Fatal(err)
	}
	var st ioStats
	_, err = applyJournal(path, []walRec{{off: 0, frame: data[:100]}}, nil, &st)
	if !errors.Is(err, unix.EIO) {
		t.Fatalf("replay from a faulting mapping: got %v, want an I/O error", err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot list open files: %v", err)
	}
	for _, fd := range fds {
		if target, _ := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); target == path {
			t.Fatalf("the journal %s is still open after the failed replay", path)
		}
	}
}
