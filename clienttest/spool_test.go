package clienttest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
)

// spoolFiles returns the names in dir that end with suffix.
func spoolFiles(t *testing.T, dir, suffix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// spoolWhileDown opens a session with a spool, saves q0/a0, stops the
// server, appends q1/a1 and q2/a2 and abandons the handle, as a program that
// crashes (or whose Close gives up) while the daemon is down. The server is
// left stopped.
func spoolWhileDown(t *testing.T, srv *clienttest.Server, dir string) (id string) {
	t.Helper()
	ctx := t.Context()
	c := srv.Dial(t, client.WithLazyConnect())
	h, err := c.OpenOrCreate(ctx, client.Alias("spooled"), client.WithSpool(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(userMsg("q0"), assistantMsg("a0")); err != nil {
		t.Fatal(err)
	}
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if got := spoolFiles(t, dir, ".spool"); len(got) != 0 || h.SpoolPath() != "" {
		t.Fatalf("after a save: spool files %q, SpoolPath %q; want none", got, h.SpoolPath())
	}
	srv.Stop()
	for _, turn := range [][2]string{{"q1", "a1"}, {"q2", "a2"}} {
		if err := h.Append(userMsg(turn[0]), assistantMsg(turn[1])); err != nil {
			t.Fatal(err)
		}
	}
	if p := h.SpoolPath(); p == "" || !slices.Equal(spoolFiles(t, dir, ".spool"), []string{filepath.Base(p)}) {
		t.Fatalf("with unsaved turns: SpoolPath %q, files %q", p, spoolFiles(t, dir, ".spool"))
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := h.Close(cctx); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Close with the server down = %v, want ErrUnavailable", err)
	}
	return h.ID()
}

// TestSpoolSendsOnNextOpen: turns appended while the daemon is down survive
// the handle (no Close succeeded), and the next Open sends them once and
// removes the spool.
func TestSpoolSendsOnNextOpen(t *testing.T) {
	srv := clienttest.NewServer(t)
	dir := filepath.Join(t.TempDir(), "spool")
	id := spoolWhileDown(t, srv, dir)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	c := srv.Dial(t)
	want := []string{"q0", "a0", "q1", "a1", "q2", "a2"}
	h, err := c.Open(t.Context(), client.Alias("spooled"), client.WithSpool(dir))
	if err != nil {
		t.Fatalf("Open with a spool: %v", err)
	}
	if h.ID() != id || h.Unsaved() != 0 || !slices.Equal(contents(h.Messages()), want) {
		t.Errorf("opened %s with %q, %d unsaved", h.ID(), contents(h.Messages()), h.Unsaved())
	}
	if got := storedContents(t, c, client.ID(id)); !slices.Equal(got, want) {
		t.Errorf("stored = %q, want %q", got, want)
	}
	if got := spoolFiles(t, dir, ""); len(got) != 0 {
		t.Errorf("spool dir after the replay holds %q", got)
	}
	// Opening again sends nothing more.
	h2, err := c.Open(t.Context(), client.ID(id), client.WithSpool(dir))
	if err != nil {
		t.Fatal(err)
	}
	if got := storedContents(t, c, client.ID(id)); !slices.Equal(got, want) || h2.Revision() != h.Revision() {
		t.Errorf("second open: stored %q, revision %d then %d", got, h.Revision(), h2.Revision())
	}
}

// TestSpoolIdempotent: the spooled append landed but its answer was lost,
// so the spool still holds turns the daemon has: the next Open stores them
// once, without an error.
func TestSpoolIdempotent(t *testing.T) {
	rec := newRecorder()
	srv := clienttest.NewServer(t, rec.options())
	c := srv.Dial(t)
	dir := t.TempDir()
	ctx := t.Context()
	h, err := c.New(ctx, client.WithSpool(dir))
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Append(userMsg("q1"), assistantMsg("a1"))
	rec.loseNext(1)
	if err := h.Save(ctx); err == nil {
		t.Fatal("Save with a lost answer succeeded")
	}
	if h.SpoolPath() == "" {
		t.Fatal("no spool after a save whose outcome is unknown")
	}
	// Abandon h: the spool holds q1/a1, which the daemon stored.
	h2, err := c.Open(ctx, client.ID(h.ID()), client.WithSpool(dir))
	if err != nil {
		t.Fatalf("Open with a spool of stored turns: %v", err)
	}
	defer h2.Close(ctx)
	if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"q1", "a1"}) {
		t.Errorf("stored = %q", got)
	}
	if got := spoolFiles(t, dir, ""); len(got) != 0 {
		t.Errorf("spool dir holds %q", got)
	}
}

// TestSpoolDamaged: a torn or corrupt spool file is neither sent nor
// deleted: Open fails with ErrSpool naming it, renames it aside, and the
// next Open works. Nothing panics.
func TestSpoolDamaged(t *testing.T) {
	for name, damage := range map[string]func([]byte) []byte{
		"torn":        func(b []byte) []byte { return b[:len(b)-7] },
		"bit flip":    func(b []byte) []byte { b[len(b)/2] ^= 0x20; return b },
		"empty":       func([]byte) []byte { return nil },
		"header only": func(b []byte) []byte { return b[:16] },
		"not a spool": func([]byte) []byte { return []byte("hello, world: not a spool file at all") },
	} {
		t.Run(name, func(t *testing.T) {
			srv := clienttest.NewServer(t)
			dir := t.TempDir()
			id := spoolWhileDown(t, srv, dir)
			files := spoolFiles(t, dir, ".spool")
			if len(files) != 1 {
				t.Fatalf("spool files %q", files)
			}
			p := filepath.Join(dir, files[0])
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			damaged := damage(b)
			if err := os.WriteFile(p, damaged, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			c := srv.Dial(t)
			_, err = c.Open(t.Context(), client.ID(id), client.WithSpool(dir))
			if !errors.Is(err, client.ErrSpool) || !strings.Contains(err.Error(), p) {
				t.Fatalf("Open with a damaged spool = %v, want ErrSpool naming %s", err, p)
			}
			kept, err := os.ReadFile(p + ".damaged")
			if err != nil || string(kept) != string(damaged) {
				t.Fatalf("damaged spool not kept as %s.damaged (%v)", p, err)
			}
			h, err := c.Open(t.Context(), client.ID(id), client.WithSpool(dir))
			if err != nil {
				t.Fatalf("second Open: %v", err)
			}
			if got := contents(h.Messages()); !slices.Equal(got, []string{"q0", "a0"}) {
				t.Errorf("opened with %q", got)
			}
		})
	}
}

// TestSpoolUnwritable: when the spool cannot be written, Append fails with
// ErrSpool and appends nothing.
func TestSpoolUnwritable(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	notADir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h, err := c.New(t.Context(), client.WithSpool(notADir))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(t.Context())
	if err := h.Append(userMsg("q")); !errors.Is(err, client.ErrSpool) {
		t.Fatalf("Append with an unwritable spool = %v, want ErrSpool", err)
	}
	if n := len(h.Messages()); n != 0 || h.Dirty() {
		t.Errorf("after a failed Append: %d messages, dirty %v", n, h.Dirty())
	}
}

// BenchmarkAppend measures what a spool adds to Append: each call rewrites
// the spool file (temp file, fsync, rename, folder fsync). A save every 16
// calls (not timed) keeps the unsaved tail short, as auto-save does. Run it
// with a fixed count (-benchtime 2000x): the untimed saves would make an
// adaptive b.N run for minutes.
func BenchmarkAppend(b *testing.B) {
	for _, spool := range []bool{false, true} {
		b.Run(fmt.Sprintf("spool=%v", spool), func(b *testing.B) {
			srv := clienttest.NewServer(b)
			c := srv.Dial(b)
			var opts []client.HandleOption
			if spool {
				opts = append(opts, client.WithSpool(b.TempDir()))
			}
			h, err := c.New(b.Context(), opts...)
			if err != nil {
				b.Fatal(err)
			}
			msg := userMsg(strings.Repeat("x", 1024))
			b.ResetTimer()
			for i := range b.N {
				if err := h.Append(msg); err != nil {
					b.Fatal(err)
				}
				if i%16 == 15 {
					b.StopTimer()
					if err := h.Save(b.Context()); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			}
		})
	}
}
