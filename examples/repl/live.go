package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// turnWriteTimeout bounds each write of a live turn, so that a daemon that
// stops answering mid-answer does not hold the terminal.
const turnWriteTimeout = 10 * time.Second

// liveAnswer writes a model's answer into the session as a live turn while
// it streams, so that the viewer and any watcher follow it: at its first
// piece the user's line is saved and the turn opened (Handle.StreamTurn),
// each piece is written as it arrives, and finish closes the turn. When the
// daemon does not take the turn (it is down), the answer is kept as a
// plain message instead, saved or spooled like any other turn.
type liveAnswer struct {
	base  context.Context // not cancelled by Ctrl-C: a cut answer is still finished
	h     *client.Handle
	user  *sessiondv1.Message
	shown *prefixWriter // the terminal

	turn   *client.Turn
	saved  bool  // the user's line is in the handle
	broken error // the turn missed a piece: finish writes the rest
	done   bool  // the turn is closed: finished, or interrupted by the daemon
	ended  bool  // finish was called: cut says how the answer ended
	cut    bool  // the answer was cut short (Ctrl-C, a failed stream)

	content, reasoning         string // the answer so far
	contentSent, reasoningSent int    // how much of it the turn holds
	model                      string
	usage                      *sessiondv1.Usage
}

func (a *liveAnswer) Write(p []byte) (int, error) {
	n, err := a.shown.Write(p)
	a.content += string(p)
	a.send()
	return n, err
}

func (a *liveAnswer) WriteReasoning(text string) {
	a.reasoning += text
	a.send()
}

// send opens the turn if need be and writes what it lacks. A failure
// leaves the rest for finish.
func (a *liveAnswer) send() {
	if a.broken != nil {
		return
	}
	ctx, cancel := context.WithTimeout(a.base, turnWriteTimeout)
	defer cancel()
	if a.turn == nil {
		if !a.saved {
			if a.broken = a.h.Append(a.user); a.broken != nil {
				return
			}
			a.saved = true
		}
		if a.turn, a.broken = a.h.StreamTurn(ctx, &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Model: a.model}); a.broken != nil {
			return
		}
	}
	a.broken = a.catchUp(ctx)
}

// catchUp writes the content and reasoning the turn does not hold yet.
func (a *liveAnswer) catchUp(ctx context.Context) error {
	if rest := a.content[a.contentSent:]; rest != "" {
		if err := a.turn.Write(ctx, rest); err != nil {
			return err
		}
		a.contentSent = len(a.content)
	}
	if rest := a.reasoning[a.reasoningSent:]; rest != "" {
		if err := a.turn.WriteReasoning(ctx, rest); err != nil {
			return err
		}
		a.reasoningSent = len(a.reasoning)
	}
	return nil
}

// finish closes the turn with the rest of the answer, the model and usage
// rep reports (rep may be nil: the stream failed). Without a turn, the
// answer is appended to the handle as a plain message.
func (a *liveAnswer) finish(rep *reply) error {
	if !a.ended {
		// The first call knows how the answer ended; a retry
		// (finishLeftOpen) passes nil and keeps that.
		a.ended, a.cut = true, rep == nil || rep.finishReason == "interrupted"
	}
	if rep != nil {
		a.model, a.usage = rep.model, rep.usage
	}
	if a.turn == nil {
		if rep == nil {
			return nil
		}
		msgs := []*sessiondv1.Message{rep.message()}
		if !a.saved {
			msgs = append([]*sessiondv1.Message{a.user}, msgs...)
		}
		return a.h.Append(msgs...)
	}
	ctx, cancel := context.WithTimeout(a.base, turnWriteTimeout)
	defer cancel()
	err := a.catchUp(ctx)
	if err == nil {
		_, err = a.turn.Finish(ctx, client.FinishOptions{Model: a.model, Usage: a.usage, Interrupted: a.cut})
	}
	a.done = err == nil || errors.Is(err, client.ErrMessageState)
	if errors.Is(err, client.ErrMessageState) {
		// The daemon closed the turn as interrupted first (its writer
		// was silent too long); the session holds what it had.
		if rerr := a.h.Reload(ctx); rerr != nil {
			return rerr
		}
		return errors.New("sessiond closed this answer as interrupted before it was finished; it keeps what it had")
	}
	return err
}

// finishLeftOpen finishes the answer an earlier line could not (the daemon
// was away). It fails while the daemon still cannot take it.
func (r *repl) finishLeftOpen() error {
	if r.unfinished == nil {
		return nil
	}
	err := r.unfinished.finish(nil)
	if !r.unfinished.done {
		return fmt.Errorf("the last answer is still open in sessiond (%s)", r.describe(err, ""))
	}
	r.unfinished = nil
	if err != nil {
		fmt.Fprintf(r.errOut, "%s\n", r.describe(err, "")) // closed as interrupted: the session goes on
	}
	return nil
}
