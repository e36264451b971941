package clienttest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
)

// TestDaemonKilledAndRestarted: the daemon dies by SIGKILL, the REPL goes on
// appending 3 turns, the daemon comes back on the same data dir and address,
// and Close saves all 3 turns exactly once.
func TestDaemonKilledAndRestarted(t *testing.T) {
	bin := needDaemon(t)
	d := clienttest.StartDaemon(t, bin, t.TempDir(), "127.0.0.1:0")
	ctx := t.Context()
	c, err := client.Dial(ctx, d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := c.OpenOrCreate(ctx, client.Alias("crashy"))
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Append(userMsg("before"), assistantMsg("saved"))
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}

	d.Kill(t)
	want := []string{"before", "saved"}
	for i := 1; i <= 3; i++ {
		q, a := fmt.Sprintf("q%d", i), fmt.Sprintf("a%d", i)
		if err := h.Append(userMsg(q), assistantMsg(a)); err != nil {
			t.Fatal(err)
		}
		want = append(want, q, a)
	}
	if err := h.Save(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Save with the daemon dead = %v, want ErrUnavailable", err)
	}
	d = d.Restart(t)

	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := h.Close(cctx); err != nil {
		t.Fatalf("Close after the restart: %v", err)
	}
	if got := storedContents(t, c, client.Alias("crashy")); !slices.Equal(got, want) {
		t.Errorf("stored = %q, want %q", got, want)
	}
	d.Stop(t)
}

// TestDaemonDownAutoSave: auto-save reports the outage, keeps the turns, and
// sends them once when the daemon is back, without Save being called.
func TestDaemonDownAutoSave(t *testing.T) {
	bin := needDaemon(t)
	d := clienttest.StartDaemon(t, bin, t.TempDir(), "127.0.0.1:0")
	ctx := t.Context()
	c, err := client.Dial(ctx, d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var errs errorLog
	h, err := c.New(ctx, client.WithAutoSave(time.Second), client.WithErrorHandler(errs.handle))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	d.Kill(t)
	_ = h.Append(userMsg("while down"), assistantMsg("kept"))
	eventually(t, 15*time.Second, "auto-save reports the outage", func() bool { return len(errs.all()) > 0 })
	if !errors.Is(errs.all()[0], client.ErrUnavailable) {
		t.Errorf("auto-save reported %v, want ErrUnavailable", errs.all()[0])
	}
	if h.Unsaved() != 2 {
		t.Fatalf("unsaved = %d, want 2", h.Unsaved())
	}
	d = d.Restart(t)
	eventually(t, 20*time.Second, "auto-save after the restart", func() bool { return !h.Dirty() })
	if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"while down", "kept"}) {
		t.Errorf("stored = %q", got)
	}
	d.Stop(t)
}
