package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Bounds of watch's reload loop: OUT_OF_RANGE means "reload and carry on",
// but a daemon that answers nothing else must not spin the CPU forever.
const (
	watchMaxResets    = 20 // consecutive resets without an event in between
	watchResetBackoff = 50 * time.Millisecond
	watchMaxBackoff   = 5 * time.Second
	cleanupTimeout    = 10 * time.Second
)

func cmdWatch(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("watch", e)
	from := fs.Uint64("from-revision", 0, "replay the changes after revision N first (0: from now)")
	pos, err := parseArgs(e, fs, args, 1, 1)
	if err != nil {
		return err
	}
	sa, err := e.parseSessionArg(pos[0])
	if err != nil {
		return err
	}
	c, err := e.dial()
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
	ref := e.idRef(sess.GetId())
	w := &watcher{e: e, c: c, ref: ref, count: sess.GetMessageCount(), name: displayName(sess)}
	rev := *from
	if rev == 0 {
		// From the revision just read rather than "now", so that nothing
		// that happens between the two calls is missed.
		rev = sess.GetRevision()
	}
	resets := 0
	backoff := watchResetBackoff
	for {
		deleted, progressed, err := w.stream(ctx, rev)
		if deleted || ctx.Err() != nil {
			// Interrupted is how a watch normally ends.
			return nil
		}
		if status.Code(err) != codes.OutOfRange {
			return e.rpcError(op, err)
		}
		if progressed {
			resets, backoff = 0, watchResetBackoff
		}
		resets++
		if resets > watchMaxResets {
			return fmt.Errorf("%s: the daemon asked to reload %d times in a row; check its logs", op, resets-1)
		}
		if resets > 1 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, watchMaxBackoff)
		}
		if rev, err = w.reload(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return e.rpcError(op, err)
		}
	}
}

type watcher struct {
	e     *env
	c     sessiondv1.SessionStoreServiceClient
	ref   *sessiondv1.SessionRef
	count int64 // messages the watcher has accounted for
	name  string
	// announced: the "watching" notice was printed (once, on the first
	// subscription).
	announced bool
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
	if md, err := stream.Header(); err == nil && md != nil && !w.announced {
		w.announced = true
		// In JSON mode stdout carries events only; the notice goes to stderr.
		out := w.e.stdout
		if w.e.json {
			out = w.e.stderr
		}
		fmt.Fprintf(out, "watching %s (%s) from revision %d; interrupt to stop\n", w.ref.GetId(), w.name, rev)
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
		fmt.Fprintf(w.e.stdout, "%s revision %d: %d messages appended\n", stamp, ev.GetRevision(), len(ev.GetMessages()))
		writeConversation(w.e.stdout, first, ev.GetMessages())
	case sessiondv1.EventType_EVENT_TYPE_REPLACED:
		fmt.Fprintf(w.e.stdout, "%s revision %d: messages replaced, now %d ('sessionctl show' prints them)\n", stamp, ev.GetRevision(), s.GetMessageCount())
	case sessiondv1.EventType_EVENT_TYPE_UPDATED:
		fmt.Fprintf(w.e.stdout, "%s revision %d: metadata updated (alias %q, title %q, labels %s)\n", stamp, ev.GetRevision(), s.GetAlias(), s.GetTitle(), sortedPairs(s.GetLabels()))
	case sessiondv1.EventType_EVENT_TYPE_DELETED:
		fmt.Fprintf(w.e.stdout, "%s revision %d: session deleted\n", stamp, ev.GetRevision())
	default:
		fmt.Fprintf(w.e.stdout, "%s revision %d: %s\n", stamp, ev.GetRevision(), strings.ToLower(ev.GetType().String()))
	}
	return nil
}

// reload fetches the session after OUT_OF_RANGE, prints the messages the
// watcher missed if the session only grew, and returns the revision to
// watch from.
func (w *watcher) reload(ctx context.Context) (uint64, error) {
	got, err := w.c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: w.ref})
	if err != nil {
		return 0, err
	}
	s := got.GetSession()
	var missed []*sessiondv1.Message
	if s.GetMessageCount() > w.count {
		// The loaded header and messages are one snapshot; Get's answer may
		// already be older than they are.
		loaded, msgs, err := w.e.loadSession(ctx, "reload", &sessiondv1.LoadSessionRequest{Ref: w.ref, Offset: w.count})
		if err != nil {
			return 0, err
		}
		s, missed = loaded, msgs
	}
	if w.e.json {
		// REPLACED is the event that tells a reader to reload; the session
		// is as it stands now.
		if err := writeJSONLine(w.e.stdout, &sessiondv1.WatchSessionResponse{
			Type: sessiondv1.EventType_EVENT_TYPE_REPLACED, Revision: s.GetRevision(), Session: s,
		}); err != nil {
			return 0, err
		}
	} else {
		fmt.Fprintf(w.e.stdout, "%s reloaded at revision %d, %d messages\n", time.Now().Format("15:04:05"), s.GetRevision(), s.GetMessageCount())
		writeConversation(w.e.stdout, w.count, missed)
	}
	w.count = s.GetMessageCount()
	return s.GetRevision(), nil
}
