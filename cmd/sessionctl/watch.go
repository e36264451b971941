package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Bounds of watch's retries. OUT_OF_RANGE means "reload and carry on", and
// a daemon that went away (a restart) is waited for, with exponential
// backoff between attempts, for as long as it takes; but a daemon that
// answers nothing but OUT_OF_RANGE must not spin forever.
const (
	watchMaxResets     = 20 // consecutive resets without an event in between
	watchRetryInitial  = 100 * time.Millisecond
	watchRetryMax      = 5 * time.Second
	watchRetryMultiply = 2
	cleanupTimeout     = 10 * time.Second
)

func watchCmd(e *env) *cobra.Command {
	var from uint64
	cmd := &cobra.Command{
		Use:   "watch ID|ALIAS",
		Short: "print a session's changes as they happen, until interrupted",
		Long: `watch prints a session's changes as they happen. It follows the session (not
the alias) and ends when the session is deleted or on Ctrl-C. If the daemon
goes away (a restart), watch reconnects with exponential backoff (up to 5s
between attempts, for as long as it takes) and resumes after the last
revision it printed; changes it can no longer replay one by one are shown
by reloading the session.`,
		Args:              exactArgs(1),
		ValidArgsFunction: e.completeSessions,
		RunE: func(cmd *cobra.Command, pos []string) error {
			sa, err := e.parseSessionArg(pos[0])
			if err != nil {
				return err
			}
			return e.watch(cmd.Context(), sa, from)
		},
	}
	cmd.Flags().Uint64Var(&from, "from-revision", 0, "replay the changes after revision N first (0: from now)")
	return cmd
}

func (e *env) watch(ctx context.Context, sa sessionArg, from uint64) error {
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	op := "watch " + sa.text
	// Resolve the alias once: watching follows the session, even if it is
	// renamed, and its count tells which messages a reload has to print.
	got, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: sa.ref})
	if err != nil {
		return e.rpcError(op, err)
	}
	sess := got.GetSession()
	w := &watcher{e: e, c: c, ref: e.idRef(sess.GetId()), count: sess.GetMessageCount(), name: displayName(sess), rev: from}
	if w.rev == 0 {
		// From the revision just read rather than "now", so that nothing
		// that happens between the two calls is missed.
		w.rev = sess.GetRevision()
	}
	resets := 0
	reload := false
	attempt := func() (struct{}, error) {
		if reload {
			if err := w.reload(ctx); err != nil {
				return struct{}{}, w.retryable(op, err, false)
			}
			reload = false
		}
		deleted, progressed, err := w.stream(ctx, w.rev)
		if deleted || ctx.Err() != nil {
			return struct{}{}, nil
		}
		if progressed {
			resets = 0
		}
		if status.Code(err) == codes.OutOfRange {
			w.lastErr = err
			reload = true
			resets++
			if resets > watchMaxResets {
				return struct{}{}, backoff.Permanent(fmt.Errorf("%s: the daemon asked to reload %d times in a row; check its logs", op, resets-1))
			}
			if resets == 1 {
				// The first reset after progress reloads at once.
				return struct{}{}, &backoff.RetryAfterError{Duration: 0}
			}
			return struct{}{}, err
		}
		return struct{}{}, w.retryable(op, err, progressed)
	}
	_, err = backoff.Retry(ctx, attempt,
		backoff.WithBackOff(&backoff.ExponentialBackOff{
			InitialInterval:     watchRetryInitial,
			RandomizationFactor: 0.2,
			Multiplier:          watchRetryMultiply,
			MaxInterval:         watchRetryMax,
		}),
		backoff.WithMaxElapsedTime(0), // for as long as it takes
		backoff.WithNotify(w.lost),
	)
	if err == nil || ctx.Err() != nil {
		// A delete, or the interrupt: how a watch normally ends.
		return nil
	}
	return err
}

// retryable sorts a failed attempt: a daemon that went away (UNAVAILABLE,
// or a stream cut without a status) is retried with backoff, restarted at
// its first interval when the stream had printed something; anything else
// ends the watch with its explanation.
func (w *watcher) retryable(op string, err error, progressed bool) error {
	var ee *exitErr
	if errors.As(err, &ee) && ee.grpc != codes.Unavailable {
		return backoff.Permanent(err) // already explained (a reload's failure)
	}
	if _, isStatus := status.FromError(err); !isStatus && ee == nil {
		return backoff.Permanent(fmt.Errorf("%s: %w", op, err)) // not the daemon's: stdout closed, say
	}
	switch grpcCode(err, exitError) {
	case codes.Unavailable, codes.Internal:
		if w.e.conn != nil {
			// gRPC's own reconnect backoff grows to two minutes; ours
			// decides when to try again.
			w.e.conn.ResetConnectBackoff()
		}
		w.lastErr = err
		if progressed {
			return &backoff.RetryAfterError{Duration: watchRetryInitial}
		}
		return err
	}
	return backoff.Permanent(w.e.rpcError(op, err))
}

// lost tells the operator, once per outage, that the watch is reconnecting.
func (w *watcher) lost(error, time.Duration) {
	err := w.lastErr
	if w.down || status.Code(err) == codes.OutOfRange {
		return
	}
	w.down = true
	why := safeLine(oneLine(status.Convert(err).Message()))
	w.e.notice(map[string]any{"reconnecting": w.ref.GetId(), "after_revision": w.rev, "message": why},
		"%s lost the daemon (%s); reconnecting with backoff, resuming after revision %d; interrupt to stop",
		time.Now().Format("15:04:05"), why, w.rev)
}

type watcher struct {
	e     *env
	c     sessiondv1.SessionStoreServiceClient
	ref   *sessiondv1.SessionRef
	count int64 // messages the watcher has accounted for
	name  string
	rev   uint64 // the last revision printed (or the one the watch started from)
	// announced: the "watching" notice was printed (on the first
	// subscription); down: the daemon was lost and not yet found again.
	announced, down bool
	lastErr         error // the last error that made the watch reconnect
}

// stream prints events from rev on until the stream ends. It reports whether
// the session was deleted and whether any event arrived.
func (w *watcher) stream(ctx context.Context, rev uint64) (deleted, progressed bool, err error) {
	stream, err := w.c.WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: w.ref, FromRevision: rev})
	if err != nil {
		return false, false, err
	}
	// The daemon sends the header once it has subscribed: from then on no
	// change is missed, so that is when "watching" is true. (A refusal,
	// such as OUT_OF_RANGE, comes as the status instead; Recv reports it.)
	if md, err := stream.Header(); err == nil && md != nil && (!w.announced || w.down) {
		// In JSON mode stdout carries events only; the notice goes to
		// stderr, as a JSON object.
		notice := map[string]any{"watching": w.ref.GetId(), "name": w.name, "from_revision": rev, "reconnected": w.down}
		switch {
		case w.e.json:
			w.e.notice(notice, "")
		case w.down:
			fmt.Fprintf(w.e.stdout, "%s reconnected; watching %s (%s) again after revision %d\n", time.Now().Format("15:04:05"), w.ref.GetId(), safeLine(w.name), rev)
		default:
			fmt.Fprintf(w.e.stdout, "watching %s (%s) from revision %d; interrupt to stop\n", w.ref.GetId(), safeLine(w.name), rev)
		}
		w.announced, w.down = true, false
	}
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return false, progressed, status.Error(codes.Unavailable, "the daemon ended the watch")
		}
		if err != nil {
			return false, progressed, err
		}
		progressed = true
		if err := w.print(ev); err != nil {
			return false, progressed, err
		}
		if ev.GetType() == sessiondv1.EventType_EVENT_TYPE_DELETED {
			return true, true, nil
		}
	}
}

func (w *watcher) print(ev *sessiondv1.WatchSessionResponse) error {
	w.rev = max(w.rev, ev.GetRevision())
	s := ev.GetSession()
	appended := ev.GetType() == sessiondv1.EventType_EVENT_TYPE_APPENDED
	first := w.count
	switch {
	case s != nil:
		w.count = s.GetMessageCount()
		if appended {
			first = w.count - int64(len(ev.GetMessages()))
		}
	case appended:
		w.count += int64(len(ev.GetMessages()))
	}
	if w.e.json {
		return writeJSONLine(w.e.stdout, ev)
	}
	stamp := time.Now().Format("15:04:05")
	switch ev.GetType() {
	case sessiondv1.EventType_EVENT_TYPE_APPENDED:
		fmt.Fprintf(w.e.stdout, "%s revision %d: %s appended\n", stamp, ev.GetRevision(), countOf(len(ev.GetMessages()), "message"))
		writeConversation(w.e.stdout, first, ev.GetMessages())
	case sessiondv1.EventType_EVENT_TYPE_REPLACED:
		fmt.Fprintf(w.e.stdout, "%s revision %d: messages replaced, now %d ('sessionctl show' prints them)\n", stamp, ev.GetRevision(), s.GetMessageCount())
	case sessiondv1.EventType_EVENT_TYPE_UPDATED:
		labels := "no labels"
		if len(s.GetLabels()) > 0 {
			labels = "labels " + safeLine(sortedPairs(s.GetLabels()))
		}
		fmt.Fprintf(w.e.stdout, "%s revision %d: metadata updated (alias %q, title %q, %s)\n", stamp, ev.GetRevision(), safeLine(s.GetAlias()), safeLine(s.GetTitle()), labels)
	case sessiondv1.EventType_EVENT_TYPE_DELETED:
		fmt.Fprintf(w.e.stdout, "%s revision %d: session deleted\n", stamp, ev.GetRevision())
	default:
		fmt.Fprintf(w.e.stdout, "%s revision %d: %s\n", stamp, ev.GetRevision(), strings.ToLower(ev.GetType().String()))
	}
	return nil
}

// countOf is "1 message", "2 messages".
func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// reload fetches the session after OUT_OF_RANGE, prints the messages the
// watcher missed if the session only grew, and moves the revision to watch
// from to the session's.
func (w *watcher) reload(ctx context.Context) error {
	got, err := w.c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: w.ref})
	if err != nil {
		return err
	}
	s := got.GetSession()
	var missed []*sessiondv1.Message
	if s.GetMessageCount() > w.count {
		// The loaded header and messages are one snapshot; Get's answer may
		// already be older than they are.
		loaded, msgs, err := w.e.loadSession(ctx, "reload", &sessiondv1.LoadSessionRequest{Ref: w.ref, Offset: w.count})
		if err != nil {
			return err
		}
		s, missed = loaded, msgs
	}
	if w.e.json {
		// REPLACED is the event that tells a reader to reload; the session
		// is as it stands now.
		if err := writeJSONLine(w.e.stdout, &sessiondv1.WatchSessionResponse{
			Type: sessiondv1.EventType_EVENT_TYPE_REPLACED, Revision: s.GetRevision(), Session: s,
		}); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w.e.stdout, "%s reloaded at revision %d, %s\n", time.Now().Format("15:04:05"), s.GetRevision(), countOf(int(s.GetMessageCount()), "message"))
		writeConversation(w.e.stdout, w.count, missed)
	}
	w.count = s.GetMessageCount()
	w.rev = s.GetRevision()
	return nil
}
