package file

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// observed returns a logger whose lines the test can read.
func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(core), logs
}

// TestDataDirMadePrivate: a data dir that existed with a loose mode (0755,
// or 1777 as a tmpfs root has) is made 0700 at open, with a warning.
func TestDataDirMadePrivate(t *testing.T) {
	for _, mode := range []os.FileMode{0o755, 0o777 | os.ModeSticky, 0o750} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, mode); err != nil {
				t.Fatal(err)
			}
			log, logs := observed()
			openStore(t, dir, WithLogger(log))
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() & (os.ModePerm | os.ModeSticky | os.ModeSetgid | os.ModeSetuid); got != dirPerm {
				t.Errorf("data dir mode after open: %v, want %v", got, os.FileMode(dirPerm))
			}
			if logs.FilterMessage("the data dir was open to other users; made it private").Len() != 1 {
				t.Errorf("no warning about the loose mode; logs: %v", logs.All())
			}
		})
	}
	t.Run("private", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		log, logs := observed()
		openStore(t, dir, WithLogger(log))
		if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 0 {
			t.Errorf("%d warnings for a private data dir", n)
		}
	})
}

// mountTmpfs mounts a tmpfs of size bytes on a new folder and unmounts it
// when the test ends. Where mounting is not allowed it skips, except in CI
// (CI=true), where the test runs as root and must not pass silently.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount a %d-byte tmpfs on %s (this test needs root, as CI runs it): %v", size, dir, err)
		}
		t.Skipf("cannot mount a tmpfs (not root?): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes the file dir/name until the filesystem is full, and
// returns its path.
func fillDisk(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				return path
			}
			t.Fatal(err)
		}
	}
}

// TestFullDiskStart: with the disk at 100%, after a clean close and after a
// crash alike, the store opens; it serves reads and deletes, refuses writes
// with ErrNoSpace, and takes writes again by itself once space is freed.
func TestFullDiskStart(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			mnt := mountTmpfs(t, 4<<20)
			dir := filepath.Join(mnt, "data")
			s, err := openPortable(t.Context(), dir)
			if err != nil {
				t.Fatal(err)
			}
			keep := mustCreate(t, s, storage.CreateRequest{Alias: "keep", Messages: msgs("k", 5)})
			drop := mustCreate(t, s, storage.CreateRequest{Alias: "drop", Messages: msgs("d", 5)})
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if crash {
				// As kill -9 leaves it: no checkpoint mark to trust, so
				// Open rescans and has more to write.
				if err := os.Remove(filepath.Join(dir, "index", cleanName)); err != nil {
					t.Fatal(err)
				}
			}
			filler := fillDisk(t, mnt, "filler")

			s, err = openPortable(t.Context(), dir)
			if err != nil {
				t.Fatalf("Open on a full disk: %v", err)
			}
			defer s.Close()
			if ids, err := loadIDs(t, s, keep.ID); err != nil || len(ids) != 5 {
				t.Fatalf("Load on a full disk: %v, %v", ids, err)
			}
			if _, err := s.Get(t.Context(), storage.Ref{Alias: "keep"}); err != nil {
				t.Fatalf("Get on a full disk: %v", err)
			}
			// Reading may trim a journal's space reserved ahead, and the
			// store take it: fill what that freed, as other programs would.
			filler2 := fillDisk(t, mnt, "filler2")
			if _, err := s.Create(t.Context(), storage.CreateRequest{Alias: "new"}); !errors.Is(err, storage.ErrNoSpace) {
				t.Fatalf("Create on a full disk: %v, want ErrNoSpace", err)
			}
			// Bigger than any space a journal reserves ahead.
			big := msg("big", strings.Repeat("b", 1<<20))
			if _, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: keep.ID}, Messages: []*sessiondv1.Message{big}}); !errors.Is(err, storage.ErrNoSpace) {
				t.Fatalf("Append on a full disk: %v, want ErrNoSpace", err)
			}
			if err := s.Delete(t.Context(), storage.Ref{ID: drop.ID}, 0); err != nil {
				t.Fatalf("Delete on a full disk: %v", err)
			}

			for _, f := range []string{filler, filler2} {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				_, err := s.Append(t.Context(), storage.AppendRequest{Ref: storage.Ref{ID: keep.ID}, Messages: msgs("x", 1)})
				if err == nil {
					break
				}
				if !errors.Is(err, storage.ErrNoSpace) || time.Now().After(deadline) {
					t.Fatalf("Append after space was freed: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// Everything acknowledged is there, and the deleted session is
			// gone, after one more open.
			s = open(t, dir)
			if ids, err := loadIDs(t, s, keep.ID); err != nil || len(ids) != 6 {
				t.Errorf("after reopening: %v, %v; want 6 messages", ids, err)
			}
			if _, err := s.Get(t.Context(), storage.Ref{ID: drop.ID}); !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("deleted session after reopening: %v, want ErrNotFound", err)
			}
			checkDir(t, dir)
		})
	}
}

// FuzzClientNumbers drives the numbers a client chooses (offsets, limits,
// tails, message counts) through the portable layer into the file store,
// at their extremes too: no panic, and either the answer a model computes
// without overflow or ErrInvalid. LoadSession with offset 1 and limit
// 2^63-1 used to panic in the file store ("makeslice: cap out of range").
func FuzzClientNumbers(f *testing.F) {
	for _, seed := range []struct {
		off, lim, count int64
		tail            bool
	}{
		{1, math.MaxInt64, 0, false}, {0, math.MaxInt64, math.MaxInt64, true}, {math.MaxInt64, math.MaxInt64, -1, false},
		{math.MinInt64, math.MinInt64, math.MinInt64, false}, {0, 3, 2, true}, {4, 1, 5, false}, {-1, 0, 6, false},
	} {
		f.Add(seed.off, seed.lim, seed.count, seed.tail)
	}
	s, err := openPortable(f.Context(), filepath.Join(f.TempDir(), "data"))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	const n = 5
	se, err := s.Create(f.Context(), storage.CreateRequest{Title: "fuzz", Messages: msgs("m", n)})
	if err != nil {
		f.Fatal(err)
	}
	ref := storage.Ref{ID: se.ID}
	f.Fuzz(func(t *testing.T, off, lim, count int64, tail bool) {
		ctx := t.Context()
		_, got, err := s.Load(ctx, ref, storage.LoadOptions{Offset: off, Limit: lim, Tail: tail})
		switch {
		case off < 0 || lim < 0 || (tail && off != 0):
			if !errors.Is(err, storage.ErrInvalid) {
				t.Fatalf("Load(offset %d, limit %d, tail %v): %v, want ErrInvalid", off, lim, tail, err)
			}
		case err != nil:
			t.Fatalf("Load(offset %d, limit %d, tail %v): %v", off, lim, tail, err)
		default:
			// The model, in big integers.
			from := new(big.Int).SetInt64(min(off, n))
			to := big.NewInt(n)
			if lim > 0 && tail {
				from = big.NewInt(n - min(lim, n))
			} else if lim > 0 {
				if end := new(big.Int).Add(from, big.NewInt(lim)); end.Cmp(to) < 0 {
					to = end
				}
			}
			if want := new(big.Int).Sub(to, from).Int64(); int64(len(got)) != want {
				t.Fatalf("Load(offset %d, limit %d, tail %v): %d messages, want %d", off, lim, tail, len(got), want)
			}
			if len(got) > 0 && got[0].GetId() != fmt.Sprintf("m%d", from.Int64()) {
				t.Fatalf("Load(offset %d, limit %d, tail %v) starts at %s, want m%d", off, lim, tail, got[0].GetId(), from.Int64())
			}
		}
		fork, err := s.Fork(ctx, storage.ForkRequest{Ref: ref, MessageCount: count})
		if count < 0 || count > n {
			if !errors.Is(err, storage.ErrInvalid) {
				t.Fatalf("Fork(message_count %d): %v, want ErrInvalid", count, err)
			}
		} else if err != nil {
			t.Fatalf("Fork(message_count %d): %v", count, err)
		} else {
			rw, err := s.Rewind(ctx, storage.RewindRequest{Ref: storage.Ref{ID: fork.ID}, MessageCount: lim})
			if lim < 0 || lim > fork.MessageCount {
				if !errors.Is(err, storage.ErrInvalid) {
					t.Fatalf("Rewind(message_count %d) of %d: %v, want ErrInvalid", lim, fork.MessageCount, err)
				}
			} else if err != nil || rw.MessageCount != lim {
				t.Fatalf("Rewind(message_count %d): %v, %v", lim, rw, err)
			}
			if err := s.Delete(ctx, storage.Ref{ID: fork.ID}, 0); err != nil {
				t.Fatal(err)
			}
		}
		listed := int64(0)
		err = s.List(ctx, storage.ListOptions{Limit: lim}, func(*storage.Session) error { listed++; return nil })
		if lim < 0 {
			if !errors.Is(err, storage.ErrInvalid) {
				t.Fatalf("List(limit %d): %v, want ErrInvalid", lim, err)
			}
		} else if err != nil || listed != 1 {
			t.Fatalf("List(limit %d): %d sessions, %v; want 1", lim, listed, err)
		}
		hits := int64(0)
		err = s.Search(ctx, storage.SearchOptions{Query: "content", Limit: lim}, func(storage.SearchHit) error { hits++; return nil })
		if lim < 0 {
			if !errors.Is(err, storage.ErrInvalid) {
				t.Fatalf("Search(limit %d): %v, want ErrInvalid", lim, err)
			}
		} else if want := min(max(lim, 0), n); (lim == 0 && hits != n) || (lim > 0 && hits != want) || err != nil {
			t.Fatalf("Search(limit %d): %d hits, %v", lim, hits, err)
		}
	})
}

// TestVanishedSessionReported: a session folder removed by hand is named in
// the log at the next open (it disappeared silently before).
func TestVanishedSessionReported(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := open(t, dir)
	gone := mustCreate(t, s, storage.CreateRequest{Alias: "gone", Title: "removed by hand", Messages: msgs("g", 2)})
	mustCreate(t, s, storage.CreateRequest{Alias: "stays"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "sessions", gone.ID)); err != nil {
		t.Fatal(err)
	}
	log, logs := observed()
	s = open(t, dir, WithLogger(log))
	lines := logs.FilterMessageSnippet("session folder missing").All()
	if len(lines) != 1 || lines[0].ContextMap()["session"] != gone.ID || lines[0].ContextMap()["alias"] != "gone" {
		t.Fatalf("log lines about the missing folder: %v; want one naming %s", lines, gone.ID)
	}
	if _, err := s.Get(t.Context(), storage.Ref{Alias: "gone"}); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Get of the removed session: %v, want ErrNotFound", err)
	}
}

// TestReadOnlyIsUnavailable: a write failing with EROFS is ErrReadOnly, a
// storage.ErrUnavailable (it was an unclassified error, answered INTERNAL).
func TestReadOnlyIsUnavailable(t *testing.T) {
	err := ioErr(&os.PathError{Op: "open", Path: "/data/sessions/x", Err: unix.EROFS})
	if !errors.Is(err, ErrReadOnly) || !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("ioErr(EROFS) = %v, want ErrReadOnly wrapping storage.ErrUnavailable", err)
	}
}

// TestCheckReportsMissingSession: fsck reports a session the index knew
// whose folder was removed by hand, and after a repair no longer does.
func TestCheckReportsMissingSession(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := open(t, dir)
	gone := mustCreate(t, s, storage.CreateRequest{Alias: "gone", Messages: msgs("g", 2)})
	mustCreate(t, s, storage.CreateRequest{Alias: "stays"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "sessions", gone.ID)); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(t.Context(), dir, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != KindMissing || rep.Findings[0].Path != filepath.Join("sessions", gone.ID) {
		t.Fatalf("findings %+v; want one KindMissing for sessions/%s", rep.Findings, gone.ID)
	}
	if rep, err = Check(t.Context(), dir, true, nil); err != nil || !rep.Findings[0].Repaired {
		t.Fatalf("repair: %+v, %v", rep, err)
	}
	if rep, err = Check(t.Context(), dir, false, nil); err != nil || rep.Damaged() {
		t.Fatalf("after repair: %+v, %v; want nothing found", rep, err)
	}
}
