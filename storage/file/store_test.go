package file

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/testing/protocmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

func msg(id, content string) *sessiondv1.Message {
	return &sessiondv1.Message{Id: id, Role: sessiondv1.Role_ROLE_USER, Content: content}
}

func msgs(prefix string, n int) []*sessiondv1.Message {
	out := make([]*sessiondv1.Message, n)
	for i := range out {
		out[i] = msg(fmt.Sprintf("%s%d", prefix, i), fmt.Sprintf("content of %s%d", prefix, i))
	}
	return out
}

// open opens dir without the cleanup checks of openStore, for tests that
// close and reopen by hand.
func open(t *testing.T, dir string, opts ...Option) *testStore {
	t.Helper()
	s, err := openPortable(t.Context(), dir, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustCreate(t *testing.T, s *testStore, req storage.CreateRequest) *storage.Session {
	t.Helper()
	se, err := s.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return se
}

func mustAppend(t *testing.T, s *testStore, id string, ms ...*sessiondv1.Message) {
	t.Helper()
	if _, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: id}, Messages: ms}); err != nil {
		t.Fatalf("Append to %s: %v", id, err)
	}
}

func loadIDs(t *testing.T, s *testStore, id string) ([]string, error) {
	t.Helper()
	_, ms, err := s.Load(t.Context(), storage.Ref{ID: id}, storage.LoadOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.GetId()
	}
	return out, nil
}

func ids(ms []*sessiondv1.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.GetId()
	}
	return out
}

// copyDir copies a data dir's files (not its lock), as a crash would leave
// them: what the store wrote, without what it would have done next.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, dirPerm)
		}
		if d.Name() == "LOCK" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, filePerm)
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
}

// journalPath returns a session's current journal file.
func journalPath(t *testing.T, dir, id string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "sessions", id, "journal-*"))
	if len(m) != 1 {
		t.Fatalf("session %s has journals %v, want one", id, m)
	}
	return m[0]
}

// indexFile returns the path of namespace ns's index file in the current
// checkpoint.
func indexFile(t *testing.T, dir, ns string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "index", cleanName))
	if err != nil {
		t.Fatalf("no checkpoint mark: %v", err)
	}
	seq, _, _, err := decodeMark(data)
	if err != nil {
		t.Fatalf("checkpoint mark: %v", err)
	}
	return filepath.Join(dir, "index", seqName(ckptPref, seq), nsFileName(ns))
}

func entryOf(t *testing.T, s *testStore, id string) *entry {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	e := s.byID[id]
	if e == nil {
		t.Fatalf("no entry for %s", id)
	}
	return e
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	_, err := Open(t.Context(), dir)
	if !errors.Is(err, storage.ErrLocked) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second Open = %v, want ErrLocked naming %s", err, dir)
	}
	_, err = Check(t.Context(), dir, false, nil)
	if !errors.Is(err, storage.ErrLocked) {
		t.Fatalf("Check of an open dir = %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, dir) // free again after Close
	_ = s2
}

// TestFormatVersionRefused: a data dir of any format but this one's (a
// newer one, or a pre-release one whose files this version does not read)
// is refused by Open and by Check, naming the format, and left as it was.
func TestFormatVersionRefused(t *testing.T) {
	for _, format := range []string{"sessiond-file-format 9\n", "sessiond-file-format 3\n", "sessiond-file-format 2\n", "sessiond-file-format 1\n"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, formatFile), []byte(format), filePerm); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSpace(format)
		if _, err := Open(t.Context(), dir); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Open of a %q dir = %v, want a refusal naming the format", name, err)
		}
		if _, err := Check(t.Context(), dir, true, nil); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Check of a %q dir = %v, want a refusal naming the format", name, err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, formatFile)); string(b) != format {
			t.Errorf("FORMAT became %q", b)
		}
	}
}

func TestPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := open(t, dir)
	se := mustCreate(t, s, storage.CreateRequest{Alias: "perm", Messages: msgs("m", 2)})
	mustAppend(t, s, se.ID, msg("x", "y"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, _ := d.Info()
		want := fs.FileMode(filePerm)
		if d.IsDir() {
			want = dirPerm
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf("%s has mode %v, want %v", path, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReopen checks that everything survives a clean close (index files
// trusted) and a crash (index rebuilt from the sessions), including folded
// journals, saves, updates, rewinds and deletes.
func TestReopen(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir, WithFoldThreshold(2<<10)) // fold often
			a := mustCreate(t, s, storage.CreateRequest{Alias: "a", Labels: map[string]string{"k": "v"}, Messages: msgs("a", 3)})
			b := mustCreate(t, s, storage.CreateRequest{Namespace: "ns1", Alias: "b"})
			c := mustCreate(t, s, storage.CreateRequest{Alias: "c"})
			var want []*sessiondv1.Message
			want = append(want, msgs("a", 3)...)
			for i := range 40 {
				m := msg(fmt.Sprintf("n%d", i), strings.Repeat("x", 100))
				mustAppend(t, s, a.ID, m)
				want = append(want, m)
			}
			if _, err := s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{ID: a.ID}, Fields: storage.UpdateAlias | storage.UpdateTitle, Alias: "a2", Title: "T"}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Save(t.Context(), storage.SaveRequest{Ref: storage.Ref{Namespace: "ns1", ID: b.ID}, Title: "saved", Messages: msgs("b", 5)}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Rewind(t.Context(), storage.RewindRequest{Ref: storage.Ref{Namespace: "ns1", ID: b.ID}, MessageCount: 2}); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(t.Context(), storage.Ref{ID: c.ID}, 0); err != nil {
				t.Fatal(err)
			}
			var metas []*storage.Session
			for _, ref := range []storage.Ref{{ID: a.ID}, {Namespace: "ns1", ID: b.ID}} {
				m, err := s.Get(t.Context(), ref)
				if err != nil {
					t.Fatal(err)
				}
				metas = append(metas, m)
			}
			if crash {
				dir2 := t.TempDir()
				copyDir(t, dir, dir2)
				dir = dir2
			} else if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := openStore(t, dir)
			for i, ref := range []storage.Ref{{Alias: "a2"}, {Namespace: "ns1", Alias: "b"}} {
				got, err := s2.Get(t.Context(), ref)
				if err != nil {
					t.Fatalf("Get %v after reopen: %v", ref, err)
				}
				if diff := cmp.Diff(metas[i], got); diff != "" {
					t.Errorf("metadata after reopen (-want +got):\n%s", diff)
				}
			}
			if _, err := s2.Get(t.Context(), storage.Ref{Alias: "a"}); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("old alias after reopen: %v, want ErrNotFound", err)
			}
			if _, err := s2.Get(t.Context(), storage.Ref{ID: c.ID}); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("deleted session after reopen: %v, want ErrNotFound", err)
			}
			_, got, err := s2.Load(t.Context(), storage.Ref{ID: a.ID}, storage.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, protocmp.Transform(), protocmp.IgnoreFields(&sessiondv1.Message{}, "created_at")); diff != "" {
				t.Errorf("messages after reopen (-want +got):\n%s", diff)
			}
			var listed []string
			if err := s2.List(t.Context(), storage.ListOptions{Labels: map[string]string{"k": "v"}}, func(m *storage.Session) error {
				listed = append(listed, m.ID)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(listed) != 1 || listed[0] != a.ID {
				t.Errorf("listed %v, want [%s]", listed, a.ID)
			}
		})
	}
}

func TestSweepAndIndexRebuild(t *testing.T) {
	for _, damageIdx := range []string{"delete", "flip", "truncate"} {
		t.Run(damageIdx, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			a := mustCreate(t, s, storage.CreateRequest{Alias: "alpha"})
			b := mustCreate(t, s, storage.CreateRequest{Namespace: "other", Alias: "beta"})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			idx := indexFile(t, dir, "")
			data, err := os.ReadFile(idx)
			if err != nil {
				t.Fatal(err)
			}
			switch damageIdx {
			case "delete":
				err = os.Remove(idx)
			case "flip":
				data[len(data)/2] ^= 0x40
				err = os.WriteFile(idx, data, filePerm)
			case "truncate":
				err = os.WriteFile(idx, data[:len(data)-9], filePerm)
			}
			if err != nil {
				t.Fatal(err)
			}
			// Leftovers of a crash: a half-made session, a half-deleted one,
			// a snapshot temp inside a session, an index temp.
			strays := []string{
				filepath.Join(dir, "sessions", tmpPref+a.ID+"-x", snapshotName),
				filepath.Join(dir, "sessions", delPref+b.ID+"-y", snapshotName),
				filepath.Join(dir, "sessions", a.ID, tmpPref+"snapshot-z"),
				filepath.Join(dir, "index", tmpPref+"default-w"),
			}
			for _, p := range strays {
				if err := os.MkdirAll(filepath.Dir(p), dirPerm); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("junk"), filePerm); err != nil {
					t.Fatal(err)
				}
			}
			_ = os.Remove(filepath.Join(dir, "index", cleanName)) // a crash: sessions get scanned
			s2 := open(t, dir)
			for _, p := range strays {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("stray %s survived Open (%v)", p, err)
				}
			}
			if got, err := s2.Get(t.Context(), storage.Ref{Alias: "alpha"}); err != nil || got.ID != a.ID {
				t.Errorf("alias alpha after rebuild = %v, %v; want %s", got, err, a.ID)
			}
			if got, err := s2.Get(t.Context(), storage.Ref{Namespace: "other", Alias: "beta"}); err != nil || got.ID != b.ID {
				t.Errorf("alias beta after rebuild = %v, %v; want %s", got, err, b.ID)
			}
			if err := s2.Close(); err != nil {
				t.Fatal(err)
			}
			data, err = os.ReadFile(indexFile(t, dir, ""))
			if err != nil {
				t.Fatalf("index not rewritten: %v", err)
			}
			if _, _, metas, err := decodeIndex(data); err != nil || len(metas) != 1 || metas[0].Alias != "alpha" {
				t.Errorf("rewritten index = %v, %v", metas, err)
			}
			checkDir(t, dir)
		})
	}
}

// TestIndexDamageWithCleanMark: a damaged index file costs a rescan of its
// namespace even when the last close was clean.
func TestIndexDamageWithCleanMark(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	a := mustCreate(t, s, storage.CreateRequest{Alias: "alpha", Messages: msgs("m", 2)})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	idx := indexFile(t, dir, "")
	data, _ := os.ReadFile(idx)
	data[len(data)-3] ^= 1
	if err := os.WriteFile(idx, data, filePerm); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, dir)
	got, err := s2.Get(t.Context(), storage.Ref{Alias: "alpha"})
	if err != nil || got.ID != a.ID || got.MessageCount != 2 {
		t.Fatalf("Get alpha = %+v, %v", got, err)
	}
}

// TestCrashDuringAppend cuts one append at every byte offset, the way a
// crash can leave it, and reopens: every acknowledged message is there, the
// cut append is there whole or not at all, and the session stays writable.
func TestCrashDuringAppend(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	se := mustCreate(t, s, storage.CreateRequest{Alias: "crash", Messages: msgs("c", 3)})
	acked := msgs("c", 3)
	for i := range 2 {
		m := msg(fmt.Sprintf("a%d", i), "acknowledged")
		mustAppend(t, s, se.ID, m)
		acked = append(acked, m)
	}
	e := entryOf(t, s, se.ID)
	start := e.j.tail
	walStart := s.wal.j.tail
	cut := []*sessiondv1.Message{msg("cut1", strings.Repeat("p", 60)), msg("cut2", "second of the batch")}
	mustAppend(t, s, se.ID, cut...)
	end := e.j.tail
	settle(t, s, e) // the journal as its pending frames leave it
	jp := journalPath(t, dir, se.ID)
	full, err := os.ReadFile(jp)
	if err != nil {
		t.Fatal(err)
	}
	base, logged := t.TempDir(), t.TempDir()
	copyDir(t, dir, base) // the store is still open: no clean mark, as after kill -9
	copyDir(t, dir, logged)
	// A crash during the append: its write-ahead log flush did not finish
	// (TestCrashDuringWALFlush cuts that flush itself), so it was never
	// acknowledged. In "logged" the flush finished: the append was
	// acknowledged, and the log restores whatever the journal lacks.
	must(t, os.Truncate(filepath.Join(base, walDir, filepath.Base(s.wal.j.path)), walStart))
	jrel, _ := filepath.Rel(dir, jp)
	wantBefore, wantAfter := ids(acked), append(ids(acked), ids(cut)...)

	type variant struct {
		name    string
		journal func(c int64) []byte
	}
	variants := []variant{
		// The tail reserved ahead reads as zeros; bytes from c on never landed.
		{"zeros", func(c int64) []byte {
			b := append([]byte(nil), full...)
			clear(b[start+c : end])
			return b
		}},
		// No reservation: the file ends where the write stopped.
		{"truncated", func(c int64) []byte { return append([]byte(nil), full[:start+c]...) }},
		// Sectors landed out of order: the start of the write is missing.
		{"hole", func(c int64) []byte {
			b := append([]byte(nil), full...)
			clear(b[start : start+c])
			return b
		}},
	}
	// Each cut opens a copy of the store, appends and reopens it: that is
	// fsync-bound, not CPU-bound, so the cuts run eight at a time. (t.Run
	// may be called from several goroutines; all of them return before this
	// test does.)
	type cutCase struct {
		v      variant
		c      int64
		logged bool
	}
	var cases []cutCase
	for _, v := range variants {
		for c := int64(0); c <= end-start; c++ {
			if v.name == "hole" && c == 0 {
				continue // nothing missing: the whole append
			}
			cases = append(cases, cutCase{v, c, false})
			if c%8 == 0 || c == end-start {
				cases = append(cases, cutCase{v, c, true})
			}
		}
	}
	runEach(cases, func(cc cutCase) {
		t.Run(fmt.Sprintf("%s/%d/logged=%v", cc.v.name, cc.c, cc.logged), func(t *testing.T) {
			v, c := cc.v, cc.c
			d := filepath.Join(t.TempDir(), "d")
			if cc.logged {
				copyDir(t, logged, d)
			} else {
				copyDir(t, base, d)
			}
			if err := os.WriteFile(filepath.Join(d, jrel), v.journal(c), filePerm); err != nil {
				t.Fatal(err)
			}
			// The frame's last bytes may be padding (zeros either way), so a
			// cut there can leave the whole append; never a part of it.
			want, alt := wantBefore, wantAfter
			if (c == end-start && v.name != "hole") || cc.logged {
				want = wantAfter
			}
			func() {
				s2, err := openPortable(t.Context(), d)
				if err != nil {
					t.Fatalf("%s cut at %d: Open: %v", v.name, c, err)
				}
				defer s2.Close()
				got, err := loadIDs(t, s2, se.ID)
				if err != nil {
					t.Fatalf("%s cut at %d: Load: %v", v.name, c, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					if !cmp.Equal(alt, got) || end-start-c >= 8 {
						t.Fatalf("%s cut at %d of %d: messages (-want +got):\n%s", v.name, c, end-start, diff)
					}
					want = alt
				}
				got = appendAndReopen(t, s2, d, se.ID)
				if diff := cmp.Diff(append(append([]string(nil), want...), "after"), got); diff != "" {
					t.Fatalf("%s cut at %d: after a new append (-want +got):\n%s", v.name, c, diff)
				}
			}()
		})
	})
}

// settle writes e's pending journal frames into its file, as its next
// write, a fold or the sealer does.
func settle(t *testing.T, s *testStore, e *entry) {
	t.Helper()
	e.wmu.Lock()
	defer s.unlock(e)
	if err := s.settleJournal(e); err != nil {
		t.Fatal(err)
	}
}

// appendAndReopen appends a message "after" to session id, closes s,
// opens dir again and returns the session's message ids.
func appendAndReopen(t *testing.T, s *testStore, dir, id string) []string {
	t.Helper()
	mustAppend(t, s, id, msg("after", "writable"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := openPortable(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := loadIDs(t, s2, id)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	return got
}

// runEach calls fn for every case, eight at a time: crash cases open
// copies of a store, which is fsync-bound, not CPU-bound. (t.Run may be
// called from several goroutines; all of them return before runEach does.)
func runEach[C any](cases []C, fn func(C)) {
	work := make(chan C)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for c := range work {
				fn(c)
			}
		})
	}
	for _, c := range cases {
		work <- c
	}
	close(work)
	wg.Wait()
}

// TestDamageIsolated damages one session's bytes in several ways; that
// session answers ErrDataLoss (never other data), the others keep working,
// and the store still opens.
func TestDamageIsolated(t *testing.T) {
	type damager func(t *testing.T, sdir string, jtail int)
	flip := func(name string, where func(size int) int) damager {
		return func(t *testing.T, sdir string, _ int) {
			p := filepath.Join(sdir, name)
			if name == "journal" {
				p = journalPath(t, filepath.Dir(filepath.Dir(sdir)), filepath.Base(sdir))
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[where(len(b))] ^= 0x10
			if err := os.WriteFile(p, b, filePerm); err != nil {
				t.Fatal(err)
			}
		}
	}
	truncate := func(name string) damager {
		return func(t *testing.T, sdir string, jtail int) {
			p := filepath.Join(sdir, name)
			if name == "journal" {
				p = journalPath(t, filepath.Dir(filepath.Dir(sdir)), filepath.Base(sdir))
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			size := len(b) / 2
			if name == "journal" {
				size = jtail - 100 // into the data, not the zeros reserved after it
			}
			if err := os.WriteFile(p, b[:size], filePerm); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name string
		dmg  damager
		// crashOnly: only detectable with the clean index's revision, so not
		// tested after a crash (where it is a torn tail by construction).
		cleanOnly bool
		// salvaged: the messages repair keeps (every intact one: the
		// snapshot's 20 in one frame, then 5 appends of one frame each);
		// -1 when nothing identifies the session, which is then moved aside.
		salvaged int
		// indexed: what repair keeps when the files identify nothing but
		// the last checkpoint (intact after a clean close) has the
		// session's metadata; 0 when it is salvaged.
		indexed int
	}{
		{"snapshot header", flip("snapshot", func(int) int { return 20 }), false, -1, 25},
		{"snapshot middle", flip("snapshot", func(n int) int { return n / 2 }), false, 5, 0},
		{"snapshot truncated", truncate("snapshot"), false, 5, 0},
		{"snapshot deleted", func(t *testing.T, sdir string, _ int) { _ = os.Remove(filepath.Join(sdir, snapshotName)) }, false, -1, 5},
		{"journal header", flip("journal", func(int) int { return 12 }), false, 25, 0},
		{"journal first commit", flip("journal", func(int) int { return 60 }), false, 24, 0},
		{"journal last commit", nil, true, 24, 0},
		{"journal truncated", truncate("journal"), true, 23, 0}, // the cut takes the last two frames
	}
	for _, c := range cases {
		for _, crash := range []bool{false, true} {
			if crash && c.cleanOnly {
				continue
			}
			t.Run(fmt.Sprintf("%s/crash=%v", c.name, crash), func(t *testing.T) {
				dir := t.TempDir()
				s := open(t, dir)
				var sessions []*storage.Session
				for i := range 4 {
					se := mustCreate(t, s, storage.CreateRequest{Alias: fmt.Sprintf("s%d", i), Messages: msgs("m", 20)})
					for j := range 5 {
						mustAppend(t, s, se.ID, msg(fmt.Sprintf("x%d", j), strings.Repeat("z", 40)))
					}
					sessions = append(sessions, se)
				}
				victim := sessions[1]
				jtail := entryOf(t, s, victim.ID).j.tail
				before, err := s.Get(t.Context(), storage.Ref{ID: victim.ID})
				if err != nil {
					t.Fatal(err)
				}
				origIDs, err := loadIDs(t, s, victim.ID)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				sdir := filepath.Join(dir, "sessions", victim.ID)
				dmg := c.dmg
				if dmg == nil { // a byte in the last frame, which ends at jtail
					dmg = flip("journal", func(int) int { return int(jtail) - 20 })
				}
				dmg(t, sdir, int(jtail))
				if crash {
					_ = os.Remove(filepath.Join(dir, "index", cleanName))
				}
				s2 := open(t, dir)
				if _, err := loadIDs(t, s2, victim.ID); !errors.Is(err, storage.ErrDataLoss) {
					t.Errorf("Load of the damaged session = %v, want ErrDataLoss", err)
				}
				if _, err := s2.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: victim.ID}, Messages: msgs("new", 1)}); !errors.Is(err, storage.ErrDataLoss) {
					t.Errorf("Append to the damaged session = %v, want ErrDataLoss", err)
				}
				if _, err := s2.Get(t.Context(), storage.Ref{ID: victim.ID}); !errors.Is(err, storage.ErrDataLoss) {
					t.Errorf("Get of the damaged session = %v, want ErrDataLoss", err)
				}
				// Its alias is known unless the snapshot's header is gone and
				// no clean index remembers it.
				_, err = s2.Get(t.Context(), storage.Ref{Alias: "s1"})
				if !errors.Is(err, storage.ErrDataLoss) && !(crash && (c.name == "snapshot header" || c.name == "snapshot deleted") && errors.Is(err, storage.ErrNotFound)) {
					t.Errorf("Get of the damaged session by alias = %v, want ErrDataLoss", err)
				}
				for _, se := range sessions {
					if se == victim {
						continue
					}
					got, err := loadIDs(t, s2, se.ID)
					if err != nil || len(got) != 25 {
						t.Errorf("Load of undamaged %s = %d messages, %v", se.Alias, len(got), err)
					}
					mustAppend(t, s2, se.ID, msg("later", "still writable"))
				}
				// Check reports it; repair salvages what is intact (or moves
				// the session aside), keeps a copy in quarantine/, and the
				// rest stays.
				if err := s2.Close(); err != nil {
					t.Fatal(err)
				}
				rep, err := Check(t.Context(), dir, true, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Findings) == 0 || rep.Findings[0].Kind != KindCorrupt || !strings.Contains(rep.Findings[0].Path, victim.ID) || !rep.Findings[0].Repaired {
					t.Errorf("Check findings = %+v, want the victim corrupt and repaired", rep.Findings)
				}
				s3 := open(t, dir)
				salvaged := c.salvaged
				if !crash && c.indexed != 0 {
					salvaged = c.indexed
				}
				if salvaged < 0 {
					if _, err := s3.Get(t.Context(), storage.Ref{ID: victim.ID}); !errors.Is(err, storage.ErrNotFound) {
						t.Errorf("quarantined session: Get = %v, want ErrNotFound", err)
					}
				} else {
					got, err := s3.Get(t.Context(), storage.Ref{Alias: "s1"})
					if err != nil || got.ID != victim.ID || got.Revision <= before.Revision {
						t.Errorf("salvaged session by alias: %+v, %v; want it at a revision above %d", got, err, before.Revision)
						if err != nil {
							return
						}
					}
					ids, err := loadIDs(t, s3, victim.ID)
					if err != nil || len(ids) != salvaged || int64(len(ids)) != got.MessageCount {
						t.Errorf("salvaged session: %d messages (%v), want %d, count %d", len(ids), err, salvaged, got.MessageCount)
					}
					// What is kept is what was there, in order.
					j := 0
					for _, id := range ids {
						for j < len(origIDs) && origIDs[j] != id {
							j++
						}
						if j == len(origIDs) {
							t.Errorf("salvaged messages %v are not an ordered subset of %v", ids, origIDs)
							break
						}
					}
					mustAppend(t, s3, victim.ID, msg("after-repair", "writable again"))
				}
				if _, err := s3.Get(t.Context(), storage.Ref{Alias: "s2"}); err != nil {
					t.Errorf("undamaged session after repair: %v", err)
				}
				if m, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*", "sessions", victim.ID)); len(m) != 1 {
					t.Errorf("victim not in quarantine: %v", m)
				}
			})
		}
	}
}

// TestAppendBytesConstant: the bytes one append writes do not depend on how
// long the session is.
func TestAppendBytesConstant(t *testing.T) {
	s := openStore(t, t.TempDir(), WithFoldThreshold(1<<40))
	short := mustCreate(t, s, storage.CreateRequest{Messages: msgs("m", 10)})
	long := mustCreate(t, s, storage.CreateRequest{Messages: msgs("m", 2000)})
	cost := func(id string) int64 {
		before := s.stats.bytesWritten.Load()
		mustAppend(t, s, id, msg("same-length-id", strings.Repeat("k", 1024)))
		return s.stats.bytesWritten.Load() - before
	}
	cost(short.ID) // first appends reserve space; compare steady state
	cost(long.ID)
	a, b := cost(short.ID), cost(long.ID)
	if a != b || a > 1200 {
		t.Errorf("one 1 KiB append wrote %d bytes on a 10-message session and %d on a 2,000-message one; want equal and about 1 KiB", a, b)
	}
}

// TestGroupCommit: concurrent appends to one session share flushes, and the
// flush observer sees each flush once, with the appends it covered.
func TestGroupCommit(t *testing.T) {
	observe, flushes := recordFlushes()
	s := openStore(t, t.TempDir(), observe)
	se := mustCreate(t, s, storage.CreateRequest{})
	const writers, each = 16, 20
	// A slow flush, as on a busy disk, makes the writers queue behind it
	// however the scheduler runs them, so the test does not depend on timing.
	s.testHooks().sync = func() error { time.Sleep(2 * time.Millisecond); return nil }
	before := s.stats.journalSyncs.Load()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: se.ID}, Messages: []*sessiondv1.Message{msg(fmt.Sprintf("w%d-%d", w, i), "x")}}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	syncs := s.stats.journalSyncs.Load() - before
	got, err := s.Get(t.Context(), storage.Ref{ID: se.ID})
	if err != nil || got.MessageCount != writers*each || got.Revision != 1+writers*each {
		t.Fatalf("after concurrent appends: %+v, %v", got, err)
	}
	if syncs >= writers*each {
		t.Errorf("%d appends took %d fdatasyncs; want fewer (group commit)", writers*each, syncs)
	}
	t.Logf("%d appends, %d fdatasyncs", writers*each, syncs)
	recs := flushes()
	covered := 0
	for _, r := range recs {
		if r.Appends < 1 || r.Bytes <= 0 || r.Latency <= 0 {
			t.Errorf("flush record %+v: want appends, bytes and latency", r)
		}
		covered += r.Appends
	}
	if covered != writers*each || int64(len(recs)) > syncs {
		t.Errorf("%d flush records covering %d appends, %d fdatasyncs; want %d appends in at most that many records", len(recs), covered, syncs, writers*each)
	}
	if f, a := s.FlushStats(); f != int64(len(recs)) || a != int64(covered) {
		t.Errorf("FlushStats = %d, %d; want %d, %d", f, a, len(recs), covered)
	}
}

// TestNoSpace: a full disk at flush time is ErrNoSpace, leaves nothing of
// the append behind, and the session keeps working once space is back.
func TestNoSpace(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	se := mustCreate(t, s, storage.CreateRequest{Messages: msgs("m", 2)})
	s.testHooks().sync = func() error { return unix.ENOSPC }
	_, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: se.ID}, Messages: msgs("full", 3)})
	if !errors.Is(err, storage.ErrNoSpace) {
		t.Fatalf("Append on a full disk = %v, want ErrNoSpace", err)
	}
	_, err = s.Update(t.Context(), storage.UpdateRequest{Ref: storage.Ref{ID: se.ID}, Fields: storage.UpdateAlias, Alias: "full"})
	if !errors.Is(err, storage.ErrNoSpace) {
		t.Fatalf("Update on a full disk = %v, want ErrNoSpace", err)
	}
	s.testHooks().sync = nil
	if got, _ := loadIDs(t, s, se.ID); len(got) != 2 {
		t.Errorf("after refused append: %v", got)
	}
	if _, err := s.Get(t.Context(), storage.Ref{Alias: "full"}); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("refused update's alias: %v, want ErrNotFound", err)
	}
	b, _ := os.ReadFile(journalPath(t, dir, se.ID))
	jc, err := decodeJournal(b)
	if err != nil || jc.torn || len(jc.records) != 0 || !allZero(b[jc.end:]) {
		t.Errorf("journal after refused writes: %+v, %v; want only the header", jc, err)
	}
	mustAppend(t, s, se.ID, msg("ok", "space again"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, dir)
	if got, _ := loadIDs(t, s2, se.ID); len(got) != 3 {
		t.Errorf("after reopen: %v, want 3 messages", got)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	a := mustCreate(t, s, storage.CreateRequest{Alias: "a", Messages: msgs("m", 3)})
	b := mustCreate(t, s, storage.CreateRequest{Alias: "b"})
	mustAppend(t, s, a.ID, msg("x", "y"))
	mustAppend(t, s, b.ID, msg("x", "y"))
	tailB := entryOf(t, s, b.ID).j.tail
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var calls int
	rep, err := Check(t.Context(), dir, false, func(done, total int) {
		calls++
		if done != calls || total != 2 {
			t.Errorf("progress(%d, %d) at call %d", done, total, calls)
		}
	})
	if err != nil || rep.Damaged() || rep.Sessions != 2 || calls != 2 {
		t.Fatalf("Check of a clean dir = %+v, %v", rep, err)
	}
	// A torn tail on b, a stray file, an orphaned journal on a, a damaged index.
	jp := journalPath(t, dir, b.ID)
	jb, _ := os.ReadFile(jp)
	junk := appendFrame(nil, []byte{typeCommit, 1, 2, 3})
	jb = append(jb[:tailB], junk[:10]...) // cut inside the payload
	must(t, os.WriteFile(jp, jb, filePerm))
	must(t, os.WriteFile(filepath.Join(dir, "sessions", "notes.txt"), []byte("hi"), filePerm))
	must(t, os.WriteFile(filepath.Join(dir, "sessions", a.ID, journalName(99)), encodeJournalHead(99, a.ID), filePerm))
	must(t, os.WriteFile(indexFile(t, dir, ""), []byte("garbage"), filePerm))
	rep, err = Check(t.Context(), dir, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[FindingKind]int{}
	for _, f := range rep.Findings {
		kinds[f.Kind]++
		if f.Repaired {
			t.Errorf("check without repair repaired %+v", f)
		}
		// The torn record's finding says what trimming keeps and what it
		// drops, never that it keeps everything acknowledged.
		if keeps := fmt.Sprintf("keeps every record before byte %d and drops that one change", tailB); f.Kind == KindTruncated && !strings.Contains(f.Detail, keeps) {
			t.Errorf("torn record finding %q does not say %q", f.Detail, keeps)
		}
	}
	want := map[FindingKind]int{KindTruncated: 1, KindStray: 1, KindOrphan: 1, KindIndex: 1}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Fatalf("findings %+v (-want +got):\n%s", rep.Findings, diff)
	}
	rep, err = Check(t.Context(), dir, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		if !f.Repaired {
			t.Errorf("not repaired: %+v", f)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "quarantine")); err != nil {
		t.Errorf("nothing quarantined: %v", err)
	}
	rep, err = Check(t.Context(), dir, false, nil)
	if err != nil || rep.Damaged() {
		t.Fatalf("Check after repair = %+v, %v; want clean", rep, err)
	}
	s2 := openStore(t, dir)
	if got, err := loadIDs(t, s2, b.ID); err != nil || len(got) != 1 {
		t.Errorf("b after repair: %v, %v", got, err)
	}
	if got, err := loadIDs(t, s2, a.ID); err != nil || len(got) != 4 {
		t.Errorf("a after repair: %v, %v", got, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// snapshotGen reads the generation of session id's snapshot in dir, and the
// segments it lists (nil for a whole snapshot).
func snapshotGen(t *testing.T, dir, id string) (uint64, *segList) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "sessions", id, snapshotName))
	if err != nil {
		t.Fatal(err)
	}
	gen, _, segs, _, _, err := decodeSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	return gen, segs
}
