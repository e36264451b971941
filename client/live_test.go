package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// newTurn opens a turn in a new session of a new daemon.
func newTurn(t *testing.T) (*client.Client, context.Context, client.Ref, *client.Turn) {
	t.Helper()
	c, ctx := dialSessiond(t)
	sess, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := client.ID(sess.ID)
	turn, err := c.OpenTurn(ctx, ref, &sessiondv1.Message{})
	if err != nil {
		t.Fatalf("OpenTurn: %v", err)
	}
	return c, ctx, ref, turn
}

// TestTurn streams an answer through a Turn while a watcher follows it,
// resumes it as a restarted program would, and finishes it.
func TestTurn(t *testing.T) {
	c, ctx, ref, turn := newTurn(t)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	// A follower joins whenever it does: it loads the message as far as it
	// is, then watches from that revision (and does so again when told to
	// reload).
	followed := make(chan string, 1)
	go func() {
		for {
			s, msgs, err := c.Load(watchCtx, ref, client.LoadOptions{Tail: true, Limit: 1})
			if err != nil {
				followed <- "load: " + err.Error()
				return
			}
			text := msgs[0].GetContent()
			if msgs[0].GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING {
				followed <- text // joined after the finish
				return
			}
			for ev, err := range c.Watch(watchCtx, ref, s.Revision) {
				if errors.Is(err, client.ErrWatchReset) {
					break
				}
				if err != nil {
					followed <- "watch: " + err.Error()
					return
				}
				if ev.Type == client.EventDelta {
					if ev.Delta.GetOffset() != int64(len(text)) {
						followed <- "gap or repeat at " + text
						return
					}
					text += ev.Delta.GetContent()
				}
				if ev.Type == client.EventFinished {
					followed <- text
					return
				}
			}
		}
	}()
	for _, p := range []string{"The ", "answer "} {
		if err := turn.Write(ctx, p); err != nil {
			t.Fatalf("Write(%q): %v", p, err)
		}
	}
	// A program that restarted finds the turn as far as it is stored.
	again, err := c.ResumeTurn(ctx, ref, turn.ID())
	if err != nil {
		t.Fatalf("ResumeTurn: %v", err)
	}
	if again.Len() != int64(len("The answer ")) {
		t.Errorf("resumed turn at %d bytes, want %d", again.Len(), len("The answer "))
	}
	if err := again.Write(ctx, "is 42."); err != nil {
		t.Fatalf("Write after resume: %v", err)
	}
	// The first Turn's offset is stale: other bytes there are refused; the
	// same bytes are a retry that changes nothing.
	if err := turn.Write(ctx, "was 7."); !errors.Is(err, client.ErrMessageState) {
		t.Errorf("stale Write: %v, want ErrMessageState", err)
	}
	if err := turn.Write(ctx, "is 42."); err != nil {
		t.Errorf("Write of bytes already stored: %v, want a no-op", err)
	}
	m, err := again.Finish(ctx, client.FinishOptions{Model: "m"})
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if m.GetContent() != "The answer is 42." || m.GetState() != sessiondv1.MessageState_MESSAGE_STATE_COMPLETE {
		t.Errorf("finished message %v", m)
	}
	if got := <-followed; got != "The answer is 42." {
		t.Errorf("watcher followed %q", got)
	}
	if _, err := c.ResumeTurn(ctx, ref, turn.ID()); !errors.Is(err, client.ErrMessageState) {
		t.Errorf("ResumeTurn of a finished message: %v, want ErrMessageState", err)
	}
}

// TestTurnInterrupted: a writer that stops its answer closes it as
// interrupted at once, keeping its text, and the session takes appends
// again without waiting for the daemon's idle timeout.
func TestTurnInterrupted(t *testing.T) {
	c, ctx, ref, turn := newTurn(t)
	if err := turn.Write(ctx, "The answ"); err != nil {
		t.Fatal(err)
	}
	m, err := turn.Finish(ctx, client.FinishOptions{Interrupted: true})
	if err != nil {
		t.Fatalf("Finish(Interrupted): %v", err)
	}
	if m.GetContent() != "The answ" || m.GetState() != sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED {
		t.Errorf("interrupted message %v", m)
	}
	if _, err := c.Append(ctx, ref, 0, &sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "next"}); err != nil {
		t.Errorf("Append after the interrupt: %v", err)
	}
}

// SetUsage stores the usage so far in the open message, replacing what was
// there, and Revision is the session's revision after each write.
func TestTurnSetUsageRevision(t *testing.T) {
	c, ctx, ref, turn := newTurn(t)
	last := uint64(0)
	check := func(after string, usage *sessiondv1.Usage) {
		t.Helper()
		s, msgs, err := c.Load(ctx, ref, client.LoadOptions{Tail: true, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if rev := turn.Revision(); rev != s.Revision || rev <= last {
			t.Errorf("after %s: Revision() = %d, session at %d, previous %d", after, rev, s.Revision, last)
		}
		last = s.Revision
		if !proto.Equal(msgs[0].GetUsage(), usage) || msgs[0].GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING {
			t.Errorf("after %s: open message %v, want usage %v", after, msgs[0], usage)
		}
	}
	check("OpenTurn", nil)
	if err := turn.Write(ctx, "The answer"); err != nil {
		t.Fatal(err)
	}
	check("Write", nil)
	for _, u := range []*sessiondv1.Usage{{InputTokens: 12, OutputTokens: 3}, {InputTokens: 12, OutputTokens: 9, ReasoningTokens: 4}} {
		if err := turn.SetUsage(ctx, u); err != nil {
			t.Fatalf("SetUsage(%v): %v", u, err)
		}
		check(fmt.Sprintf("SetUsage(%v)", u), u)
	}
}

// TestHandleStreamTurn streams an answer through a Handle's turn while a
// watcher follows it: the handle's view and revision stay in step, so the
// next turn saves without a conflict.
func TestHandleStreamTurn(t *testing.T) {
	c, ctx := dialSessiond(t)
	h, err := c.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	if err := h.Append(&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "question"}); err != nil {
		t.Fatal(err)
	}
	// A watcher in place before the turn: it sees each change from then on.
	ready, watched := followTurn(ctx, c, client.ID(h.ID()))
	for i := 0; ; i++ {
		_ = h.SetSummary(fmt.Sprint("watching ", i))
		if err := h.Save(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ready:
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	turn, err := h.StreamTurn(ctx, &sessiondv1.Message{})
	if err != nil {
		t.Fatalf("StreamTurn: %v", err)
	}
	if h.Dirty() || len(h.Messages()) != 2 || h.Messages()[1].GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING {
		t.Fatalf("after StreamTurn: dirty %v, messages %v", h.Dirty(), h.Messages())
	}
	if err := h.Append(&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "too soon"}); !errors.Is(err, client.ErrMessageState) {
		t.Errorf("Append during the turn = %v, want ErrMessageState", err)
	}
	if _, err := h.StreamTurn(ctx, &sessiondv1.Message{}); !errors.Is(err, client.ErrMessageState) {
		t.Errorf("a second StreamTurn = %v, want ErrMessageState", err)
	}
	for _, p := range []string{"The ", "answer."} {
		if err := turn.Write(ctx, p); err != nil {
			t.Fatalf("Write(%q): %v", p, err)
		}
	}
	if _, err := turn.Finish(ctx, client.FinishOptions{Model: "m"}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	deltas, err := (<-watched)()
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	if got := strings.Join(deltas, "|"); got != "The |answer." {
		t.Errorf("the watcher saw deltas %q, want %q", got, "The |answer.")
	}
	last := h.Messages()[1]
	if last.GetContent() != "The answer." || last.GetState() != sessiondv1.MessageState_MESSAGE_STATE_COMPLETE || last.GetModel() != "m" {
		t.Errorf("the handle's view after Finish: %v", last)
	}
	sess, err := c.Get(ctx, client.ID(h.ID()))
	if err != nil || h.Revision() != sess.Revision {
		t.Fatalf("handle at revision %d, daemon at %v (%v)", h.Revision(), sess, err)
	}
	// The revision is in step: the next turn saves at once.
	if err := h.Append(&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "next"}); err != nil {
		t.Fatal(err)
	}
	if err := h.Save(ctx); err != nil {
		t.Fatalf("Save after the turn: %v", err)
	}
}

// followTurn watches r until the end of its next live turn and sends the
// content of each delta it saw. It closes ready once it has seen a change,
// so that the caller knows the watch is in place: until then it starts again
// from the session's current revision when told to reload.
func followTurn(ctx context.Context, c *client.Client, r client.Ref) (ready chan struct{}, done chan func() ([]string, error)) {
	ready, done = make(chan struct{}), make(chan func() ([]string, error), 1)
	go func() {
		var deltas []string
		result := func(err error) { done <- func() ([]string, error) { return deltas, err } }
		for watching := false; ; {
			s, err := c.Get(ctx, r)
			if err != nil {
				result(err)
				return
			}
			for ev, err := range c.Watch(ctx, r, s.Revision) {
				switch {
				case errors.Is(err, client.ErrWatchReset) && !watching:
				case err != nil:
					result(err)
					return
				case !watching:
					watching = true
					close(ready)
				case ev.Type == client.EventDelta:
					deltas = append(deltas, ev.Delta.GetContent())
				case ev.Type == client.EventFinished:
					result(nil)
					return
				}
			}
		}
	}()
	return ready, done
}

// TestHandleStreamTurnInterrupted: a program that dies mid-turn finds the
// message interrupted, with the text written, when it opens the session
// again.
func TestHandleStreamTurnInterrupted(t *testing.T) {
	c, ctx := dialSessiond(t, "--stream-idle-timeout", "1s")
	h, err := c.New(ctx, client.WithAlias("crashy"))
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Append(&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "question"})
	turn, err := h.StreamTurn(ctx, &sessiondv1.Message{})
	if err != nil {
		t.Fatal(err)
	}
	if err := turn.Write(ctx, "half an ans"); err != nil {
		t.Fatal(err)
	}
	// The program dies here: no Finish. The next program opens the session
	// once the daemon's sweep has closed the message.
	var msgs []*sessiondv1.Message
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		again, err := c.Open(ctx, client.Alias("crashy"))
		if err != nil {
			t.Fatal(err)
		}
		msgs = again.Messages()
		if err := again.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if msgs[len(msgs)-1].GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING || time.Now().After(deadline) {
			break
		}
	}
	last := msgs[len(msgs)-1]
	if len(msgs) != 2 || last.GetState() != sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED || last.GetContent() != "half an ans" {
		t.Fatalf("reopened: %d messages, last %v", len(msgs), last)
	}
	// The old handle learns it too: Finish finds the message closed, and
	// the handle takes appends again.
	if _, err := turn.Finish(ctx, client.FinishOptions{}); !errors.Is(err, client.ErrMessageState) {
		t.Errorf("Finish after the sweep = %v, want ErrMessageState", err)
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Append(&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "again"}); err != nil {
		t.Errorf("Append after the interrupted turn: %v", err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
