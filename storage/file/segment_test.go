package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// foldOften is a fold threshold that makes a fold every few 1 KiB appends.
const foldOften = 4 << 10

func kib(id string) *sessiondv1.Message { return msg(id, strings.Repeat("k", 1024)) }

// segmentFiles lists the snap-* and journal-* files of session id.
func segmentFiles(t *testing.T, dir, id string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, "sessions", id))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		if isSegmentName(de.Name()) {
			names = append(names, de.Name())
		}
	}
	return names
}

// TestFoldAppends: a fold copies nothing, so a growing session costs less
// than 3 bytes written per byte appended (journal, write-ahead log, and
// the folds' small files); its segments read back after a clean close and
// after a crash, metadata changes included, and pass Check's checksums; a
// save writes the session
// whole again and drops them.
func TestFoldAppends(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, WithFoldThreshold(foldOften))
	a := mustCreate(t, s, storage.CreateRequest{Alias: "a", Messages: msgs("m", 3)})
	other := mustCreate(t, s, storage.CreateRequest{Alias: "other", Messages: msgs("o", 2)})
	want := ids(msgs("m", 3))
	before := s.stats.bytesWritten.Load()
	var appended int64
	for i := range 60 {
		m := kib(fmt.Sprintf("a%d", i))
		mustAppend(t, s, a.ID, m)
		want = append(want, m.Id)
		appended += int64(len(m.Content))
		if i == 20 {
			if _, err := s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{ID: a.ID}, Fields: storage.UpdateTitle, Title: "mid"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	written := s.stats.bytesWritten.Load() - before
	if r := float64(written) / float64(appended); r >= 3 {
		t.Errorf("appending %d bytes wrote %d: %.2f bytes per byte appended, want under 3", appended, written, r)
	}
	gen, segs := snapshotGen(t, dir, a.ID)
	if segs == nil || len(segs.journals) < 10 || segs.base != 1 || gen != segs.base+uint64(len(segs.journals)) {
		t.Fatalf("after 60 KiB at a 4 KiB fold threshold: snapshot generation %d lists %+v; want about 15 journals after snap-1", gen, segs)
	}
	meta, err := s.Get(t.Context(), storage.Ref{ID: a.ID})
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, s2 *testStore, want []string) {
		t.Helper()
		got, err := loadIDs(t, s2, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("messages (-want +got):\n%s", diff)
		}
		m, err := s2.Get(t.Context(), storage.Ref{Alias: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if m.Title != "mid" || m.Revision < meta.Revision || m.Tally.Usage != meta.Tally.Usage {
			t.Errorf("metadata %+v, want title mid at revision %d or later", m, meta.Revision)
		}
		if got, err := loadIDs(t, s2, other.ID); err != nil || len(got) != 2 {
			t.Errorf("other session: %v, %v", got, err)
		}
	}
	t.Run("crash", func(t *testing.T) {
		check(t, openStore(t, crashCopy(t, dir)), want)
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, WithFoldThreshold(foldOften))
	t.Run("reopen", func(t *testing.T) { check(t, s, want) })
	// More appends after a reopen extend the list the reopened store read.
	for i := range 10 {
		m := kib(fmt.Sprintf("b%d", i))
		mustAppend(t, s, a.ID, m)
		want = append(want, m.Id)
	}
	if gen2, segs2 := snapshotGen(t, dir, a.ID); gen2 <= gen || segs2 == nil || segs2.base != 1 {
		t.Fatalf("after a reopen, folds went from generation %d to %d listing %+v", gen, gen2, segs2)
	}
	check(t, s, want)
	// Each fold lists the checksum the journal's writes kept, from its
	// create, a fold, or a load: Check verifies it against the file.
	if rep, err := Check(t.Context(), crashCopy(t, dir), false, nil); err != nil || rep.Damaged() {
		t.Fatalf("Check after folds: %+v, %v", rep, err)
	}

	if _, err := s.Save(t.Context(), storage.SaveRequest{Ref: storage.Ref{ID: a.ID}, Title: "mid", Messages: msgs("s", 4)}); err != nil {
		t.Fatal(err)
	}
	gen3, segs3 := snapshotGen(t, dir, a.ID)
	if segs3 != nil {
		t.Errorf("a save left a segmented snapshot: %+v", segs3)
	}
	if got := segmentFiles(t, dir, a.ID); !slices.Equal(got, []string{journalName(gen3)}) {
		t.Errorf("after a save the session has %v, want only %s", got, journalName(gen3))
	}
	if got, err := loadIDs(t, s, a.ID); err != nil || !slices.Equal(got, ids(msgs("s", 4))) {
		t.Errorf("after save: %v, %v", got, err)
	}
}

// foldCrash is the data dir as a crash at one step of a fold leaves it.
type foldCrash struct {
	step  string
	dir   string
	acked []string // the messages acknowledged then
}

// TestCrashDuringFold copies the data dir at every durable step of two
// folds (the first, which keeps the whole snapshot as a segment, and one
// that extends the list), and tears the fold's new files at every byte
// offset: the new journal's header, and the new snapshot's temp file. Each
// opens with every acknowledged message, stays writable, and Check finds
// nothing.
func TestCrashDuringFold(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, WithFoldThreshold(foldOften))
	se := mustCreate(t, s, storage.CreateRequest{Alias: "f", Messages: msgs("m", 2)})
	bystander := mustCreate(t, s, storage.CreateRequest{Alias: "b", Messages: msgs("b", 2)})
	acked := ids(msgs("m", 2))
	var pending []string
	var crashes []foldCrash
	renamed := 0
	var mu sync.Mutex
	s.testHooks().step = func(step string) {
		mu.Lock()
		defer mu.Unlock()
		if renamed >= 2 {
			return
		}
		d := filepath.Join(t.TempDir(), "d")
		copyDir(t, dir, d)
		crashes = append(crashes, foldCrash{step: fmt.Sprintf("fold%d/%s", renamed+1, step), dir: d, acked: slices.Clone(pending)})
		if step == "renamed" {
			renamed++
		}
	}
	for i := 0; renamed < 2; i++ {
		if i > 100 {
			t.Fatal("no second fold after 100 appends")
		}
		m := kib(fmt.Sprintf("a%d", i))
		pending = append(slices.Clone(acked), m.Id)
		mustAppend(t, s, se.ID, m)
		acked = pending
	}
	s.testHooks().step = nil
	var steps []string
	for _, c := range crashes {
		steps = append(steps, c.step)
	}
	wantSteps := []string{"fold1/linked", "fold1/synced", "fold1/journal", "fold1/renamed", "fold2/synced", "fold2/journal", "fold2/renamed"}
	if diff := cmp.Diff(wantSteps, steps); diff != "" {
		t.Fatalf("fold steps (-want +got):\n%s", diff)
	}

	type variant struct {
		name  string
		base  foldCrash
		apply func(t *testing.T, d string)
	}
	var cases []variant
	for i, c := range crashes {
		cases = append(cases, variant{name: c.step, base: c})
		if !strings.HasSuffix(c.step, "/journal") {
			continue
		}
		// What the step after this one wrote: the new journal's header
		// (written before this copy) and the snapshot (renamed next).
		done := crashes[i+1]
		gen, segs := snapshotGen(t, done.dir, se.ID)
		if segs == nil {
			t.Fatalf("%s: the fold wrote a whole snapshot", done.step)
		}
		snap, err := os.ReadFile(filepath.Join(done.dir, "sessions", se.ID, snapshotName))
		if err != nil {
			t.Fatal(err)
		}
		jrel := filepath.Join("sessions", se.ID, journalName(gen))
		head := encodeJournalHead(gen, se.ID)
		for n := range len(head) {
			cases = append(cases, variant{name: fmt.Sprintf("%s/torn-journal-%d", c.step, n), base: c, apply: func(t *testing.T, d string) {
				must(t, os.WriteFile(filepath.Join(d, jrel), head[:n], filePerm))
			}})
		}
		for n := range len(snap) + 1 {
			cases = append(cases, variant{name: fmt.Sprintf("%s/torn-snapshot-%d", c.step, n), base: c, apply: func(t *testing.T, d string) {
				must(t, os.WriteFile(filepath.Join(d, "sessions", se.ID, tmpPref+"snapshot-x"), snap[:n], filePerm))
			}})
		}
	}
	runEach(cases, func(v variant) {
		t.Run(v.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "d")
			copyDir(t, v.base.dir, d)
			if v.apply != nil {
				v.apply(t, d)
			}
			s2, err := openPortable(t.Context(), d)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			got, err := loadIDs(t, s2, se.ID)
			if err != nil {
				s2.Close()
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(v.base.acked, got); diff != "" {
				s2.Close()
				t.Fatalf("messages (-acknowledged +got):\n%s", diff)
			}
			if got, err := loadIDs(t, s2, bystander.ID); err != nil || len(got) != 2 {
				t.Errorf("bystander: %v, %v", got, err)
			}
			got = appendAndReopen(t, s2, d, se.ID)
			if diff := cmp.Diff(append(slices.Clone(v.base.acked), "after"), got); diff != "" {
				t.Fatalf("after a new append (-want +got):\n%s", diff)
			}
			rep, err := Check(t.Context(), d, false, nil)
			if err != nil || rep.Damaged() {
				t.Errorf("Check = %+v, %v; want clean", rep, err)
			}
		})
	})
}

// TestSegmentDamage damages a folded session's files: every byte of its
// segmented snapshot, the whole snapshot kept as a segment, a segment
// journal, a segment cut short or gone. The session answers ErrDataLoss,
// another session is unaffected, Check names the damaged file, and repair
// gives back every message of every intact frame.
func TestSegmentDamage(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, WithFoldThreshold(foldOften))
	se := mustCreate(t, s, storage.CreateRequest{Alias: "d", Messages: msgs("m", 3)})
	other := mustCreate(t, s, storage.CreateRequest{Alias: "o", Messages: msgs("o", 2)})
	acked := ids(msgs("m", 3))
	for i := range 20 {
		m := kib(fmt.Sprintf("a%d", i))
		mustAppend(t, s, se.ID, m)
		acked = append(acked, m.Id)
	}
	mustAppend(t, s, se.ID, msg("last", "in the current journal"))
	acked = append(acked, "last")
	_, segs := snapshotGen(t, dir, se.ID)
	if segs == nil || len(segs.journals) < 3 {
		t.Fatalf("not folded enough: %+v", segs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join("sessions", se.ID)
	snap, err := os.ReadFile(filepath.Join(dir, sdir, snapshotName))
	if err != nil {
		t.Fatal(err)
	}
	flip := func(name string, at func(n int) int) func(t *testing.T, d string) {
		return func(t *testing.T, d string) {
			p := filepath.Join(d, sdir, name)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[at(len(b))] ^= 0x10
			must(t, os.WriteFile(p, b, filePerm))
		}
	}
	type damageCase struct {
		name    string
		file    string // the file Check must name
		damage  func(t *testing.T, d string)
		keepAll bool // repair keeps every acknowledged message
	}
	mid := func(n int) int { return n / 2 }
	seg := journalName(segs.base + 1)
	cases := []damageCase{
		{"base-snapshot", snapName(segs.base), flip(snapName(segs.base), mid), false},
		{"segment-journal", seg, flip(seg, mid), false},
		{"segment-short", seg, func(t *testing.T, d string) {
			must(t, os.Truncate(filepath.Join(d, sdir, seg), int64(segs.journals[1].length-8)))
		}, false},
		{"segment-missing", seg, func(t *testing.T, d string) { must(t, os.Remove(filepath.Join(d, sdir, seg))) }, false},
	}
	for i := range snap {
		cases = append(cases, damageCase{fmt.Sprintf("snapshot-byte-%d", i), snapshotName, flip(snapshotName, func(int) int { return i }), true})
	}
	runEach(cases, func(c damageCase) {
		t.Run(c.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "d")
			copyDir(t, dir, d)
			c.damage(t, d)
			s2, err := openPortable(t.Context(), d)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			_, err = loadIDs(t, s2, se.ID)
			_, gerr := s2.Get(t.Context(), storage.Ref{ID: se.ID})
			if !errors.Is(err, storage.ErrDataLoss) && !errors.Is(gerr, storage.ErrDataLoss) {
				t.Errorf("damaged session: Load %v, Get %v; want ErrDataLoss", err, gerr)
			}
			if got, err := loadIDs(t, s2, other.ID); err != nil || len(got) != 2 {
				t.Errorf("other session: %v, %v", got, err)
			}
			must(t, s2.Close())
			rep, err := Check(t.Context(), d, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, f := range rep.Findings {
				found = found || (f.Kind == KindCorrupt && f.Path == filepath.Join(sdir, c.file))
			}
			if !found {
				t.Fatalf("Check findings %+v; want %s corrupt", rep.Findings, filepath.Join(sdir, c.file))
			}
			if _, err := Check(t.Context(), d, true, nil); err != nil {
				t.Fatal(err)
			}
			if rep, err := Check(t.Context(), d, false, nil); err != nil || rep.Damaged() {
				t.Fatalf("Check after repair = %+v, %v; want clean", rep, err)
			}
			s3, err := openPortable(t.Context(), d)
			if err != nil {
				t.Fatal(err)
			}
			defer s3.Close()
			got, err := loadIDs(t, s3, se.ID)
			if err != nil {
				t.Fatalf("after repair: %v", err)
			}
			if c.keepAll {
				if diff := cmp.Diff(acked, got); diff != "" {
					t.Errorf("after repair (-acknowledged +got):\n%s", diff)
				}
			} else if !isSubsequence(got, acked) || len(got) < len(acked)-segsMsgs || len(got) == len(acked) {
				t.Errorf("after repair got %d of %d messages: %v; want all but those of the damaged frames", len(got), len(acked), got)
			}
			if got, err := loadIDs(t, s3, other.ID); err != nil || len(got) != 2 {
				t.Errorf("other session after repair: %v, %v", got, err)
			}
		})
	})
}

// segsMsgs bounds the messages that one damaged segment in
// TestSegmentDamage can hold: a 4 KiB fold threshold of 1 KiB messages.
const segsMsgs = 5

func isSubsequence(sub, of []string) bool {
	i := 0
	for _, x := range of {
		if i < len(sub) && sub[i] == x {
			i++
		}
	}
	return i == len(sub)
}

// TestSegmentOrphans: a crash during a fold or save leaves segment files
// the snapshot does not list; a load sweeps them, Check reports them as
// orphans and repair moves them aside.
func TestSegmentOrphans(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, WithFoldThreshold(foldOften))
	se := mustCreate(t, s, storage.CreateRequest{Messages: msgs("m", 1)})
	for i := range 8 {
		mustAppend(t, s, se.ID, kib(fmt.Sprintf("a%d", i)))
	}
	gen, segs := snapshotGen(t, dir, se.ID)
	if segs == nil {
		t.Fatal("not folded")
	}
	must(t, s.Close())
	sdir := filepath.Join(dir, "sessions", se.ID)
	base, err := os.ReadFile(filepath.Join(sdir, snapName(segs.base)))
	if err != nil {
		t.Fatal(err)
	}
	stray := []string{snapName(gen), journalName(gen + 1), journalName(0)}
	for _, n := range stray {
		must(t, os.WriteFile(filepath.Join(sdir, n), base, filePerm))
	}
	rep, err := Check(t.Context(), dir, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range rep.Findings {
		if f.Kind != KindOrphan {
			t.Errorf("finding %+v, want orphans only", f)
		}
		got = append(got, filepath.Base(f.Path))
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(stray))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("orphans (-want +got):\n%s", diff)
	}
	s2 := openStore(t, dir)
	if got, err := loadIDs(t, s2, se.ID); err != nil || len(got) != 9 {
		t.Fatalf("load: %v, %v", got, err)
	}
	for _, n := range stray {
		if _, err := os.Stat(filepath.Join(sdir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not swept by the load: %v", n, err)
		}
	}
}

// TestFoldGivesBackReserve: a fold gives back the space its journal
// reserved past its data, so that each segment journal is as long as the
// snapshot lists it. A crash between the snapshot's rename and that
// truncate leaves the reserve, which is no damage: the next load gives it
// back, and so does Check with repair, but never past a byte that is not
// zero. On the temp dir's file system (ext4 here) and on tmpfs.
func TestFoldGivesBackReserve(t *testing.T) {
	for _, fs := range []string{"tempdir", "tmpfs"} {
		t.Run(fs, func(t *testing.T) {
			root := t.TempDir()
			if fs == "tmpfs" {
				root = mountTmpfs(t, 64<<20)
			}
			dir := filepath.Join(root, "data")
			s := open(t, dir, WithFoldThreshold(foldOften))
			se := mustCreate(t, s, storage.CreateRequest{Messages: msgs("m", 1)})
			sdir := filepath.Join("sessions", se.ID)
			acked := ids(msgs("m", 1))
			var pending, crashAcked []string
			crash := filepath.Join(root, "crash") // the first fold's crash after its rename
			var mu sync.Mutex
			s.testHooks().step = func(step string) {
				mu.Lock()
				defer mu.Unlock()
				if step == "renamed" && crashAcked == nil {
					copyDir(t, dir, crash)
					crashAcked = slices.Clone(pending)
				}
			}
			for i := range 16 {
				m := kib(fmt.Sprintf("a%d", i))
				pending = append(slices.Clone(acked), m.Id)
				mustAppend(t, s, se.ID, m)
				acked = pending
			}
			s.testHooks().step = nil
			if crashAcked == nil {
				t.Fatal("no fold after 16 KiB at a 4 KiB fold threshold")
			}
			size := func(t *testing.T, path string) int64 {
				t.Helper()
				fi, err := os.Stat(path)
				if err != nil {
					t.Fatal(err)
				}
				return fi.Size()
			}

			_, segs := snapshotGen(t, dir, se.ID)
			if segs == nil || len(segs.journals) < 2 {
				t.Fatalf("folds listed %+v; want two journals or more", segs)
			}
			for i, ref := range segs.journals {
				p := filepath.Join(dir, sdir, journalName(segs.base+uint64(i)))
				if got := size(t, p); got != int64(ref.length) {
					t.Errorf("segment %s holds %d bytes after its fold, its listed length is %d", filepath.Base(p), got, ref.length)
				}
			}

			// The crash left the reserve: the journal holds more than listed.
			_, segs = snapshotGen(t, crash, se.ID)
			if segs == nil || len(segs.journals) != 1 {
				t.Fatalf("the crash copy's snapshot lists %+v; want one journal", segs)
			}
			seg := filepath.Join(sdir, journalName(segs.base))
			listed := int64(segs.journals[0].length)
			long := size(t, filepath.Join(crash, seg))
			if long <= listed {
				t.Fatalf("%s holds %d bytes at the rename, its listed length is %d: no reserve to give back", seg, long, listed)
			}
			copies := map[string]string{}
			for _, name := range []string{"load", "repair", "nonzero"} {
				copies[name] = filepath.Join(root, name)
				copyDir(t, crash, copies[name])
			}
			if rep, err := Check(t.Context(), crash, false, nil); err != nil || rep.Damaged() {
				t.Errorf("Check = %+v, %v; want clean", rep, err)
			}
			if got := size(t, filepath.Join(crash, seg)); got != long {
				t.Errorf("Check without repair changed %s from %d bytes to %d", seg, long, got)
			}

			load := func(t *testing.T, d string) {
				t.Helper()
				s2, err := openPortable(t.Context(), d)
				if err != nil {
					t.Fatal(err)
				}
				got, err := loadIDs(t, s2, se.ID)
				must(t, s2.Close())
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(crashAcked, got); diff != "" {
					t.Errorf("messages (-acknowledged +got):\n%s", diff)
				}
			}
			load(t, copies["load"])
			if got := size(t, filepath.Join(copies["load"], seg)); got != listed {
				t.Errorf("after a load %s holds %d bytes, want its listed length %d", seg, got, listed)
			}

			if rep, err := Check(t.Context(), copies["repair"], true, nil); err != nil || rep.Damaged() {
				t.Errorf("Check with repair = %+v, %v; want no finding", rep, err)
			}
			if got := size(t, filepath.Join(copies["repair"], seg)); got != listed {
				t.Errorf("after Check with repair %s holds %d bytes, want its listed length %d", seg, got, listed)
			}

			p := filepath.Join(copies["nonzero"], seg)
			f, err := os.OpenFile(p, os.O_WRONLY, filePerm)
			if err != nil {
				t.Fatal(err)
			}
			_, err = f.WriteAt([]byte{1}, long-1)
			must(t, errors.Join(err, f.Close()))
			load(t, copies["nonzero"])
			if got := size(t, p); got != long {
				t.Errorf("a load cut %s, which holds a byte other than zero past its listed length, from %d bytes to %d", seg, long, got)
			}
		})
	}
}
