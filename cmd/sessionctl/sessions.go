package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

func cmdLs(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("ls", e)
	labels := labelsFlag{}
	fs.Var(labels, "label", "only sessions with label K=V (repeatable; all must match)")
	since := fs.String("since", "", "only sessions updated since a duration ago (36h) or an RFC3339 time")
	prefix := fs.String("prefix", "", "only sessions whose alias starts with this (same as ALIAS_PREFIX)")
	limit := fs.Int64("limit", 0, "list at most N sessions (0: all)")
	pos, err := parseArgs(e, fs, args, 0, 1)
	if err != nil {
		return err
	}
	if len(pos) == 1 {
		if *prefix != "" && *prefix != pos[0] {
			return usageErrorf("ls: give the alias prefix once, as ALIAS_PREFIX or --prefix")
		}
		*prefix = pos[0]
	}
	if *limit < 0 {
		return usageErrorf("ls: --limit must not be negative")
	}
	req := &sessiondv1.ListSessionsRequest{Namespace: e.namespace, AliasPrefix: *prefix, Labels: labels, Limit: *limit}
	if *since != "" {
		t, err := parseSince(*since, time.Now())
		if err != nil {
			return err
		}
		req.UpdatedAfter = timestamppb.New(t)
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	stream, err := c.ListSessions(ctx, req)
	if err != nil {
		return e.rpcError("ls", err)
	}
	return printStream(e, "ls", stream, "ID\tALIAS\tMESSAGES\tUPDATED\tTITLE\tLABELS",
		func(resp *sessiondv1.ListSessionsResponse) proto.Message { return resp.GetSession() },
		func(w io.Writer, resp *sessiondv1.ListSessionsResponse) {
			s := resp.GetSession()
			alias := s.GetAlias()
			if alias == "" {
				alias = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", s.GetId(), alias, s.GetMessageCount(),
				fmtTime(s.GetUpdatedAt()), clip(s.GetTitle(), 40), sortedPairs(s.GetLabels()))
		})
}

// printStream prints each frame of a listing's stream: as a JSON line (of
// what jsonOf picks) with --json, else as a row of a table under header.
// op names the command in errors.
func printStream[F any](e *env, op string, stream grpc.ServerStreamingClient[F], header string,
	jsonOf func(*F) proto.Message, row func(io.Writer, *F)) error {
	var tw *tabwriter.Writer
	if !e.json {
		tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, header)
	}
	err := recvEach(e, op, stream, func(frame *F) error {
		if e.json {
			return writeJSONLine(e.stdout, jsonOf(frame))
		}
		row(tw, frame)
		return nil
	})
	if err != nil || tw == nil {
		return err
	}
	return tw.Flush()
}

// recvEach calls f on each frame of stream until the stream ends. A failed
// receive is explained by rpcError(op); f's errors are returned as they are.
func recvEach[F any](e *env, op string, stream grpc.ServerStreamingClient[F], f func(*F) error) error {
	for {
		frame, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return e.rpcError(op, err)
		}
		if err := f(frame); err != nil {
			return err
		}
	}
}

// loadSession streams a whole session (or the part opts asks for) into memory.
func (e *env) loadSession(ctx context.Context, op string, req *sessiondv1.LoadSessionRequest) (*sessiondv1.Session, []*sessiondv1.Message, error) {
	c, err := e.dial()
	if err != nil {
		return nil, nil, err
	}
	stream, err := c.LoadSession(ctx, req)
	if err != nil {
		return nil, nil, e.rpcError(op, err)
	}
	var sess *sessiondv1.Session
	var msgs []*sessiondv1.Message
	err = recvEach(e, op, stream, func(resp *sessiondv1.LoadSessionResponse) error {
		if resp.GetSession() != nil && sess == nil {
			sess = resp.GetSession()
		}
		msgs = append(msgs, resp.GetMessages()...)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if sess == nil {
		return nil, nil, fmt.Errorf("%s: the daemon sent no session header; is it a sessiond?", op)
	}
	return sess, msgs, nil
}

func cmdShow(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("show", e)
	tail := fs.Int64("tail", 0, "show only the last N messages (0: all)")
	pos, err := parseArgs(e, fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *tail < 0 {
		return usageErrorf("show: --tail must not be negative")
	}
	sa, err := e.parseSessionArg(pos[0])
	if err != nil {
		return err
	}
	req := &sessiondv1.LoadSessionRequest{Ref: sa.ref}
	if *tail > 0 {
		req.Limit, req.Tail = *tail, true
	}
	sess, msgs, err := e.loadSession(ctx, "show "+sa.text, req)
	if err != nil {
		return err
	}
	if e.json {
		sess.Messages = msgs
		return writeJSONLine(e.stdout, sess)
	}
	w := bufio.NewWriter(e.stdout)
	writeHeader(w, sess)
	first := sess.GetMessageCount() - int64(len(msgs))
	if first < 0 {
		first = 0
	}
	if first > 0 {
		fmt.Fprintf(w, "\n(%d earlier messages not shown)\n", first)
	}
	writeConversation(w, first, msgs)
	return w.Flush()
}

func cmdRm(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("rm", e)
	yes := fs.Bool("yes", false, "delete without asking")
	fs.BoolVar(yes, "y", false, "short for --yes")
	pos, err := parseArgs(e, fs, args, 1, -1)
	if err != nil {
		return err
	}
	sas := make([]sessionArg, len(pos))
	for i, p := range pos {
		if sas[i], err = e.parseSessionArg(p); err != nil {
			return err
		}
	}
	// Refuse before touching the daemon: a script that forgot --yes must
	// not be left waiting for an answer nobody will type.
	if !*yes && !isTerminal(e.stdin) {
		return usageErrorf("rm: refusing to delete without confirmation: stdin is not a terminal; pass --yes")
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	in := bufio.NewReader(e.stdin)
	for _, sa := range sas {
		op := "rm " + sa.text
		ref := sa.ref
		if !*yes {
			resp, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: ref})
			if err != nil {
				return e.rpcError(op, err)
			}
			s := resp.GetSession()
			fmt.Fprintf(e.stderr, "Delete session %s (alias %q, title %q, %d messages, updated %s)? [y/N] ",
				s.GetId(), s.GetAlias(), clip(s.GetTitle(), 60), s.GetMessageCount(), fmtTime(s.GetUpdatedAt()))
			answer, err := in.ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("%s: read answer: %w", op, err)
			}
			if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
				fmt.Fprintf(e.stderr, "kept %s\n", sa.text)
				continue
			}
			// Delete what was shown: by id, so that an alias moved meanwhile
			// to another session does not redirect the delete.
			ref = e.idRef(s.GetId())
		}
		if _, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: ref}); err != nil {
			return e.rpcError(op, err)
		}
		if !e.json {
			fmt.Fprintf(e.stdout, "deleted %s\n", sa.text)
		}
	}
	return nil
}

func cmdRename(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("rename", e)
	pos, err := parseArgs(e, fs, args, 2, 2)
	if err != nil {
		return err
	}
	sa, err := e.parseSessionArg(pos[0])
	if err != nil {
		return err
	}
	alias := pos[1]
	if alias != "" {
		if err := storage.ValidateAlias(alias); err != nil {
			return usageErrorf("rename: NEWALIAS: %v", err)
		}
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	resp, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{
		Ref:        sa.ref,
		Session:    &sessiondv1.Session{Alias: alias},
		UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"alias"}},
	})
	if err != nil {
		return e.rpcError("rename "+sa.text, err)
	}
	if e.json {
		return writeJSONLine(e.stdout, resp.GetSession())
	}
	if alias == "" {
		fmt.Fprintf(e.stdout, "%s has no alias now\n", resp.GetSession().GetId())
	} else {
		fmt.Fprintf(e.stdout, "%s is now %s\n", resp.GetSession().GetId(), alias)
	}
	return nil
}

func cmdFork(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("fork", e)
	n := fs.Int64("messages", 0, "copy the first N messages (0: all)")
	alias := fs.String("alias", "", "alias of the new session")
	title := fs.String("title", "", "title of the new session (default: the source's)")
	pos, err := parseArgs(e, fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *n < 0 {
		return usageErrorf("fork: --messages must not be negative")
	}
	if *alias != "" {
		if err := storage.ValidateAlias(*alias); err != nil {
			return usageErrorf("fork: --alias: %v", err)
		}
	}
	sa, err := e.parseSessionArg(pos[0])
	if err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	resp, err := c.ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: sa.ref, MessageCount: *n, Alias: *alias, Title: *title})
	if err != nil {
		return e.rpcError("fork "+sa.text, err)
	}
	s := resp.GetSession()
	if e.json {
		return writeJSONLine(e.stdout, s)
	}
	fmt.Fprintf(e.stdout, "%s\n", s.GetId())
	return nil
}

func cmdRewind(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("rewind", e)
	pos, err := parseArgs(e, fs, args, 2, 2)
	if err != nil {
		return err
	}
	sa, err := e.parseSessionArg(pos[0])
	if err != nil {
		return err
	}
	n, err := parseCount("rewind: N", pos[1])
	if err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	resp, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: sa.ref, MessageCount: n})
	if err != nil {
		return e.rpcError("rewind "+sa.text, err)
	}
	s := resp.GetSession()
	if e.json {
		return writeJSONLine(e.stdout, s)
	}
	fmt.Fprintf(e.stdout, "%s now has %d messages (revision %d)\n", displayName(s), s.GetMessageCount(), s.GetRevision())
	return nil
}

func cmdSearch(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet("search", e)
	limit := fs.Int64("limit", 0, "show at most N hits (0: all)")
	pos, err := parseArgs(e, fs, args, 1, 1)
	if err != nil {
		return err
	}
	if pos[0] == "" {
		return usageErrorf("search: QUERY is empty")
	}
	if *limit < 0 {
		return usageErrorf("search: --limit must not be negative")
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	stream, err := c.SearchSessions(ctx, &sessiondv1.SearchSessionsRequest{Namespace: e.namespace, Query: pos[0], Limit: *limit})
	if err != nil {
		return e.rpcError("search", err)
	}
	return printStream(e, "search", stream, "SESSION\tMESSAGE\tSNIPPET",
		func(hit *sessiondv1.SearchSessionsResponse) proto.Message { return hit },
		func(w io.Writer, hit *sessiondv1.SearchSessionsResponse) {
			idx := "-"
			if hit.GetMessageIndex() >= 0 {
				idx = fmt.Sprint(hit.GetMessageIndex())
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", displayName(hit.GetSession()), idx, clip(hit.GetSnippet(), 100))
		})
}
