package clienttest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

func TestHandleOpenWays(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()

	h, err := c.New(ctx, client.WithAlias("proj"), client.WithTitle("Project"))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if _, err := uuid.Parse(h.ID()); err != nil || h.Alias() != "proj" || h.Revision() != 1 {
		t.Fatalf("New: id %q alias %q rev %d", h.ID(), h.Alias(), h.Revision())
	}
	if err := h.Append(userMsg("one")); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		open func() (*client.Handle, error)
	}{
		{"Open by id", func() (*client.Handle, error) { return c.Open(ctx, client.ID(h.ID())) }},
		{"Open by alias", func() (*client.Handle, error) { return c.Open(ctx, client.Alias("proj")) }},
		{"OpenOrCreate existing", func() (*client.Handle, error) { return c.OpenOrCreate(ctx, client.Alias("proj")) }},
		{"ParseRef id", func() (*client.Handle, error) { return c.Open(ctx, client.ParseRef(h.ID())) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := tt.open()
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close(ctx)
			if g.ID() != h.ID() || g.Title() != "Project" || !slices.Equal(contents(g.Messages()), []string{"one"}) {
				t.Errorf("opened %s %q %q", g.ID(), g.Title(), contents(g.Messages()))
			}
		})
	}

	if _, err := c.Open(ctx, client.Alias("missing")); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Open missing = %v, want ErrNotFound", err)
	}
	n, err := c.OpenOrCreate(ctx, client.Alias("fresh"), client.WithTitle("Fresh"))
	if err != nil {
		t.Fatalf("OpenOrCreate new alias: %v", err)
	}
	if n.ID() == h.ID() || n.Alias() != "fresh" || n.Title() != "Fresh" || len(n.Messages()) != 0 {
		t.Errorf("OpenOrCreate made %s alias %q title %q", n.ID(), n.Alias(), n.Title())
	}
	id := uuid.NewString()
	byID, err := c.OpenOrCreate(ctx, client.ID(id))
	if err != nil || byID.ID() != id {
		t.Fatalf("OpenOrCreate(ID(%s)) = %v, %v", id, byID, err)
	}
	// An empty handle is never saved: closing it sends nothing.
	if err := byID.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Get(ctx, client.ID(id)); err != nil || s.Revision != 1 {
		t.Errorf("after closing an empty handle: %+v, %v", s, err)
	}
}

func TestHandleAppendAndMessages(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	h, err := c.New(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(t.Context())

	mine := userMsg("hi")
	if err := h.Append(mine, assistantMsg("hello")); err != nil {
		t.Fatal(err)
	}
	if mine.GetId() != "" || mine.GetCreatedAt() != nil {
		t.Error("Append modified the caller's message")
	}
	got := h.Messages()
	if len(got) != 2 || got[0].GetId() == "" || got[0].GetId() == got[1].GetId() || got[0].GetCreatedAt() == nil {
		t.Fatalf("Messages after Append = %v", got)
	}
	if _, err := uuid.Parse(got[0].GetId()); err != nil {
		t.Errorf("message id %q is not a UUID", got[0].GetId())
	}
	got[0].Content = "changed"
	if h.Messages()[0].GetContent() != "hi" {
		t.Error("Messages did not return a copy")
	}
	if !h.Dirty() || h.Unsaved() != 2 {
		t.Errorf("Dirty %v Unsaved %d, want true 2", h.Dirty(), h.Unsaved())
	}

	bad := []struct {
		name string
		msgs []*sessiondv1.Message
	}{
		{"nil", []*sessiondv1.Message{nil}},
		{"no role", []*sessiondv1.Message{{Content: "x"}}},
		{"id already in the handle", []*sessiondv1.Message{{Id: got[1].GetId(), Role: sessiondv1.Role_ROLE_USER}}},
		{"id twice in the batch", []*sessiondv1.Message{{Id: "a", Role: sessiondv1.Role_ROLE_USER}, {Id: "a", Role: sessiondv1.Role_ROLE_USER}}},
		// The daemon's rules for one message, applied before a save would
		// send it.
		{"control character in the id", []*sessiondv1.Message{{Id: "a\nb", Role: sessiondv1.Role_ROLE_USER}}},
		{"invalid UTF-8 content", []*sessiondv1.Message{{Role: sessiondv1.Role_ROLE_USER, Content: "x\xff"}}},
		{"unknown role", []*sessiondv1.Message{{Role: sessiondv1.Role(42)}}},
	}
	for _, tt := range bad {
		if err := h.Append(tt.msgs...); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("Append(%s) = %v, want ErrInvalid", tt.name, err)
		}
	}
	if n := len(h.Messages()); n != 2 {
		t.Errorf("refused appends left %d messages, want 2", n)
	}
}

// TestSaveSendsOnlyWhatIsNew checks which RPCs each save sends.
func TestSaveSendsOnlyWhatIsNew(t *testing.T) {
	rec := newRecorder()
	srv := clienttest.NewServer(t, rec.options())
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)

	// A clean handle sends nothing.
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rec.writes(); n != 0 {
		t.Fatalf("saving a clean handle sent %d writes", n)
	}

	_ = h.Append(userMsg("1"), assistantMsg("2"))
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	_ = h.Append(userMsg("3"))
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rec.sizes(); !slices.Equal(got, []int{2, 1}) {
		t.Errorf("AppendMessages batch sizes = %v, want [2 1]", got)
	}
	if h.Revision() != 3 || h.Dirty() {
		t.Errorf("revision %d dirty %v, want 3 false", h.Revision(), h.Dirty())
	}

	// Summary and metadata go through UpdateSession.
	_ = h.SetSummary("a summary")
	_ = h.SetMetadata(map[string]string{"model": "echo"})
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if rec.count("UpdateSession") != 1 || rec.count("SaveSession") != 0 {
		t.Errorf("Update %d Save %d, want 1 0", rec.count("UpdateSession"), rec.count("SaveSession"))
	}
	s, err := c.Get(ctx, client.ID(h.ID()))
	if err != nil || s.Summary != "a summary" || s.Metadata["model"] != "echo" {
		t.Fatalf("Get = %+v, %v", s, err)
	}
}

// TestSaveRetryAfterLostAnswer: the append lands but the client sees
// DEADLINE_EXCEEDED; the next save must not duplicate it, even with more
// messages appended in between.
func TestSaveRetryAfterLostAnswer(t *testing.T) {
	for _, viaClose := range []bool{false, true} {
		t.Run(fmt.Sprintf("viaClose=%v", viaClose), func(t *testing.T) {
			rec := newRecorder()
			srv := clienttest.NewServer(t, rec.options())
			c := srv.Dial(t)
			ctx := t.Context()
			h, err := c.New(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_ = h.Append(userMsg("q1"), assistantMsg("a1"))
			rec.loseNext(1)
			err = h.Save(ctx)
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("Save with a lost answer = %v, want DeadlineExceeded", err)
			}
			if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"q1", "a1"}) {
				t.Fatalf("the injected append did not land: %q", got)
			}
			_ = h.Append(userMsg("q2"))
			if viaClose {
				err = h.Close(ctx)
			} else {
				err = h.Save(ctx)
			}
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"q1", "a1", "q2"}) {
				t.Errorf("stored = %q, want each message once", got)
			}
			// The retry resent the batch whose answer was lost (a no-op
			// for the daemon, which holds it), then the new message.
			if got := rec.sizes(); !slices.Equal(got, []int{2, 2, 1}) {
				t.Errorf("append batch sizes = %v, want [2 2 1]", got)
			}
		})
	}
}

func TestAutoSave(t *testing.T) {
	t.Run("interval", func(t *testing.T) {
		rec := newRecorder()
		srv := clienttest.NewServer(t, rec.options())
		c := srv.Dial(t)
		h, err := c.New(t.Context(), client.WithAutoSave(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close(t.Context())
		// Clean: two ticks pass without a write.
		time.Sleep(2500 * time.Millisecond)
		if n := rec.writes(); n != 0 {
			t.Fatalf("auto-save of a clean handle sent %d writes", n)
		}
		_ = h.Append(userMsg("auto"), assistantMsg("saved"))
		eventually(t, 5*time.Second, "auto-save", func() bool {
			s, err := c.Get(t.Context(), client.ID(h.ID()))
			return err == nil && s.MessageCount == 2
		})
		if h.Dirty() {
			t.Error("handle still dirty after auto-save")
		}
	})
	t.Run("idle", func(t *testing.T) {
		srv := clienttest.NewServer(t)
		c := srv.Dial(t)
		h, err := c.New(t.Context(), client.WithIdleSave(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close(t.Context())
		_ = h.Append(userMsg("idle"))
		eventually(t, 5*time.Second, "idle save", func() bool {
			s, err := c.Get(t.Context(), client.ID(h.ID()))
			return err == nil && s.MessageCount == 1
		})
	})
}

// TestConflictTwoHandles: two handles on one session; the second writer gets
// ErrConflict (auto-save reports it once and stops), and Reload puts its
// unsaved messages after the first writer's.
func TestConflictTwoHandles(t *testing.T) {
	rec := newRecorder()
	srv := clienttest.NewServer(t, rec.options())
	c := srv.Dial(t)
	ctx := t.Context()
	a, err := c.New(ctx, client.WithAlias("shared"))
	if err != nil {
		t.Fatal(err)
	}
	var errs errorLog
	b, err := c.Open(ctx, client.Alias("shared"), client.WithAutoSave(300*time.Millisecond), client.WithErrorHandler(errs.handle))
	if err != nil {
		t.Fatal(err)
	}
	_ = a.Append(userMsg("a1"), assistantMsg("a2"))
	if err := a.Save(ctx); err != nil {
		t.Fatal(err)
	}
	_ = b.Append(userMsg("b1"))
	eventually(t, 5*time.Second, "auto-save reports the conflict", func() bool { return len(errs.all()) > 0 })
	if err := errs.all()[0]; !errors.Is(err, client.ErrConflict) {
		t.Fatalf("auto-save reported %v, want ErrConflict", err)
	}
	// Auto-save stopped retrying: no more appends, no more reports.
	before := rec.count("AppendMessages")
	time.Sleep(time.Second)
	if n := rec.count("AppendMessages"); n != before || len(errs.all()) != 1 {
		t.Errorf("after the conflict auto-save sent %d more appends and %d reports", n-before, len(errs.all()))
	}
	if err := b.Save(ctx); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("b.Save = %v, want ErrConflict", err)
	}
	if err := b.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"a1", "a2", "b1"}
	if got := contents(b.Messages()); !slices.Equal(got, want) {
		t.Errorf("after Reload b has %q, want %q", got, want)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("b.Close: %v", err)
	}
	if got := storedContents(t, c, client.Alias("shared")); !slices.Equal(got, want) {
		t.Errorf("stored = %q, want %q", got, want)
	}
	// a's view is now stale: its next save conflicts too.
	_ = a.Append(userMsg("a3"))
	if err := a.Save(ctx); !errors.Is(err, client.ErrConflict) {
		t.Errorf("stale a.Save = %v, want ErrConflict", err)
	}
}

func TestRewindResetFork(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx, client.WithTitle("orig"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	_ = h.Append(userMsg("u1"), assistantMsg("a1"), userMsg("u2"), assistantMsg("a2"))

	// Rewind saves what is pending first.
	if err := h.Rewind(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if got := contents(h.Messages()); !slices.Equal(got, []string{"u1", "a1"}) {
		t.Errorf("handle after Rewind(2) = %q", got)
	}
	if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"u1", "a1"}) {
		t.Errorf("stored after Rewind(2) = %q", got)
	}
	if err := h.Rewind(ctx, 3); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("Rewind beyond = %v, want ErrInvalid", err)
	}

	_ = h.Append(userMsg("u3"))
	f, err := h.Fork(ctx, client.ForkOptions{Alias: "branch"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	if f.ID() == h.ID() || f.Alias() != "branch" || f.Title() != "orig" {
		t.Errorf("fork %s alias %q title %q", f.ID(), f.Alias(), f.Title())
	}
	if got := contents(f.Messages()); !slices.Equal(got, []string{"u1", "a1", "u3"}) {
		t.Errorf("fork messages = %q", got)
	}
	fs, _ := c.Get(ctx, client.ID(f.ID()))
	if fs.Parent == nil || fs.Parent.SessionID != h.ID() {
		t.Errorf("fork parent = %+v", fs.Parent)
	}
	// The fork and the original now diverge.
	_ = f.Append(assistantMsg("only in fork"))
	if err := f.Save(ctx); err != nil {
		t.Fatal(err)
	}

	id := h.ID()
	if err := h.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if h.ID() != id || len(h.Messages()) != 0 {
		t.Errorf("after Reset: id %s, %d messages", h.ID(), len(h.Messages()))
	}
	if got := storedContents(t, c, client.ID(id)); len(got) != 0 {
		t.Errorf("stored after Reset = %q", got)
	}
	if got := storedContents(t, c, client.ID(f.ID())); !slices.Equal(got, []string{"u1", "a1", "u3", "only in fork"}) {
		t.Errorf("fork stored = %q", got)
	}
	_ = h.Append(userMsg("fresh"))
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if got := storedContents(t, c, client.ID(id)); !slices.Equal(got, []string{"fresh"}) {
		t.Errorf("stored after Reset and a new turn = %q", got)
	}
}

func TestWithoutSystemMessages(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx, client.WithoutSystemMessages())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	_ = h.Append(systemMsg("be brief"), userMsg("u1"), assistantMsg("a1"), userMsg("u2"))
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"u1", "a1", "u2"}) {
		t.Errorf("stored = %q, want no system message", got)
	}
	// Counts refer to stored messages: keep 2 = u1, a1.
	if err := h.Rewind(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if got := contents(h.Messages()); !slices.Equal(got, []string{"be brief", "u1", "a1"}) {
		t.Errorf("handle after Rewind(2) = %q", got)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := contents(h.Messages()); !slices.Equal(got, []string{"be brief", "u1", "a1"}) {
		t.Errorf("handle after Reload = %q", got)
	}
	if err := h.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if got := contents(h.Messages()); !slices.Equal(got, []string{"be brief"}) {
		t.Errorf("handle after Reset = %q", got)
	}
	// A handle holding only a local system message is clean.
	if h.Dirty() {
		t.Error("a handle with only a local system message is dirty")
	}
}

func TestCloseSemantics(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Append(userMsg("kept"))
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"kept"}) {
		t.Errorf("stored after Close = %q", got)
	}
	if err := h.Close(ctx); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	calls := map[string]func() error{
		"Append":      func() error { return h.Append(userMsg("late")) },
		"Save":        func() error { return h.Save(ctx) },
		"Reload":      func() error { return h.Reload(ctx) },
		"Rewind":      func() error { return h.Rewind(ctx, 0) },
		"Reset":       func() error { return h.Reset(ctx) },
		"SetSummary":  func() error { return h.SetSummary("x") },
		"SetMetadata": func() error { return h.SetMetadata(nil) },
		"Fork":        func() error { _, err := h.Fork(ctx, client.ForkOptions{}); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, client.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

// TestCloseFailsWhileServerDown: Close gives up when its ctx ends, keeps the
// handle open with its messages, and a later Close saves them once.
func TestCloseFailsWhileServerDown(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()
	var errs errorLog
	h, err := c.New(ctx, client.WithAutoSave(200*time.Millisecond), client.WithErrorHandler(errs.handle))
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Append(userMsg("q1"), assistantMsg("a1"))
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_ = h.Append(userMsg("q2"), assistantMsg("a2"))
	// Auto-save reports the outage instead of retrying silently.
	eventually(t, 10*time.Second, "auto-save reports the outage", func() bool { return len(errs.all()) > 0 })
	if err := errs.all()[0]; !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("auto-save reported %v, want ErrUnavailable", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
	err = h.Close(cctx)
	cancel()
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Close with the server down = %v, want ErrUnavailable", err)
	}
	if got := contents(h.Messages()); !slices.Equal(got, []string{"q1", "a1", "q2", "a2"}) || h.Unsaved() != 2 {
		t.Fatalf("after a failed Close: %q, %d unsaved", got, h.Unsaved())
	}
	if err := h.Append(userMsg("q3")); err != nil {
		t.Fatalf("Append after a failed Close: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel = context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := h.Close(cctx); err != nil {
		t.Fatalf("Close after the restart: %v", err)
	}
	if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"q1", "a1", "q2", "a2", "q3"}) {
		t.Errorf("stored = %q", got)
	}
}

// TestConcurrentUse appends, saves and auto-saves from many goroutines (run
// with -race); every message is stored exactly once, in each writer's order.
func TestConcurrentUse(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx, client.WithIdleSave(5*time.Millisecond), client.WithAutoSave(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := h.Append(userMsg(fmt.Sprintf("w%d-%02d", w, i))); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
				if i%5 == 0 {
					if err := h.Save(ctx); err != nil {
						t.Errorf("Save: %v", err)
					}
				}
				_ = h.Messages()
				_ = h.Revision()
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			_ = h.SetSummary(time.Now().String())
			time.Sleep(2 * time.Millisecond)
		}
	})
	wg.Wait()
	summary := h.Summary()
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := c.Get(ctx, client.ID(h.ID())); err != nil || s.Summary != summary {
		t.Errorf("stored summary = %q (%v), want the last one set, %q", s.Summary, err, summary)
	}
	got := storedContents(t, c, client.ID(h.ID()))
	if len(got) != writers*each {
		t.Fatalf("stored %d messages, want %d", len(got), writers*each)
	}
	last := map[byte]string{}
	for _, s := range got {
		if prev := last[s[1]]; prev >= s {
			t.Errorf("writer %c: %s stored after %s", s[1], s, prev)
		}
		last[s[1]] = s
	}
}

// TestLostAnswerThenAnotherWriter: an append whose answer was lost landed,
// and then another writer appended too. The handle's retry must not take the
// session as its own: ErrConflict, and Reload puts its unsaved message after
// everything stored.
func TestLostAnswerThenAnotherWriter(t *testing.T) {
	rec := newRecorder()
	srv := clienttest.NewServer(t, rec.options())
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	_ = h.Append(userMsg("q1"))
	rec.loseNext(1)
	if err := h.Save(ctx); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Save with a lost answer = %v, want DeadlineExceeded", err)
	}
	if _, err := c.Append(ctx, client.ID(h.ID()), 0, userMsg("other")); err != nil {
		t.Fatal(err)
	}
	_ = h.Append(userMsg("q2"))
	if err := h.Save(ctx); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("Save after another writer = %v, want ErrConflict", err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"q1", "other", "q2"}) {
		t.Errorf("stored = %q, want q1 other q2", got)
	}
}

// TestLostUpdateAnswer: an UpdateSession whose answer was lost landed; the
// next save (with a new message) finds the session one revision ahead with
// the handle's own summary, and goes on.
func TestLostUpdateAnswer(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()
	h, err := c.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	_ = h.SetSummary("mine")
	// The update lands through another connection, as a lost answer would
	// leave it: the handle still thinks it unsaved.
	if _, err := c.Update(ctx, client.ID(h.ID()), client.SetSummary("mine")); err != nil {
		t.Fatal(err)
	}
	_ = h.Append(userMsg("q1"))
	if err := h.Save(ctx); err != nil {
		t.Fatalf("Save = %v, want the handle to catch up with its own summary", err)
	}
	if h.Dirty() {
		t.Error("handle still dirty")
	}
	if got := storedContents(t, c, client.ID(h.ID())); !slices.Equal(got, []string{"q1"}) {
		t.Errorf("stored = %q", got)
	}
}
