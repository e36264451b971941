package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestTurn streams an answer through a Turn while a watcher follows it,
// resumes it as a restarted program would, and finishes it.
func TestTurn(t *testing.T) {
	addr, stop := startSessiond()
	defer stop()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := client.ID(sess.ID)
	turn, err := c.OpenTurn(ctx, ref, &sessiondv1.Message{})
	if err != nil {
		t.Fatalf("OpenTurn: %v", err)
	}
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
