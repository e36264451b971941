package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

func lsCmd(e *env) *cobra.Command {
	labels := labelsFlag{}
	var since, prefix, model string
	var limit int64
	cmd := &cobra.Command{
		Use:   "ls [ALIAS_PREFIX]",
		Short: "list sessions, newest-updated first",
		Example: `  sessionctl ls
  sessionctl ls proj- --label team=x --since 7d
  sessionctl ls --model gpt-4.1
  sessionctl ls --since 2026-11-01 --json`,
		Args:              rangeArgs(0, 1),
		ValidArgsFunction: e.completeSessions,
		RunE: func(cmd *cobra.Command, pos []string) error {
			if len(pos) == 1 {
				if prefix != "" && prefix != pos[0] {
					return usageErrorf("ls: give the alias prefix once, as ALIAS_PREFIX or --prefix")
				}
				prefix = pos[0]
			}
			if limit < 0 {
				return usageErrorf("ls: --limit must not be negative")
			}
			req := &sessiondv1.ListSessionsRequest{Namespace: e.namespace, AliasPrefix: prefix, Labels: labels, Limit: limit, Model: model}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				req.UpdatedAfter = timestamppb.New(t)
			}
			return e.ls(cmd.Context(), req)
		},
	}
	f := cmd.Flags()
	f.Var(labels, "label", "only sessions with label K=V (repeatable; all must match)")
	f.StringVar(&since, "since", "", "only sessions updated since: a duration ago (36h, 7d, 2w), a date (2026-11-01) or an RFC3339 time")
	f.StringVar(&prefix, "prefix", "", "only sessions whose alias starts with this (same as ALIAS_PREFIX)")
	f.Int64Var(&limit, "limit", 0, "list at most N sessions (0: all)")
	f.StringVar(&model, "model", "", "only sessions with a message written by this model")
	return cmd
}

func (e *env) ls(ctx context.Context, req *sessiondv1.ListSessionsRequest) error {
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	if e.json {
		stream, err := c.ListSessions(ctx, req)
		if err != nil {
			return e.rpcError("ls", err)
		}
		return recvEach(e, "ls", stream, func(resp *sessiondv1.ListSessionsResponse) error {
			return writeJSONLine(e.stdout, resp.GetSession())
		})
	}
	ss, err := e.listSessions(ctx, c, "ls", req)
	if err != nil {
		return err
	}
	unreadable := e.unreadable(ctx, c, ss)
	tb := newTable(e.stdout, "ID", "ALIAS", "MESSAGES", "TOKENS IN/OUT", "MODELS", "UPDATED", "TITLE", "LABELS", "STATUS")
	n := 0
	for i, s := range ss {
		alias := cmp.Or(safeLine(s.GetAlias()), "-")
		st := "ok"
		if unreadable[i] != "" {
			st = unreadable[i]
			n++
		}
		if err := tb.row(s.GetId(), alias, fmt.Sprint(s.GetMessageCount()), fmtTokens(s.GetUsage()), fmtModels(s.GetModels()),
			fmtTime(s.GetUpdatedAt()), clip(s.GetTitle(), 40), clip(sortedPairs(s.GetLabels()), 60), st); err != nil {
			return err
		}
	}
	if err := tb.flush(); err != nil {
		return err
	}
	if n > 0 {
		fmt.Fprintf(e.stderr, "sessionctl: ls: %d sessions could not be read (marked above); stop sessiond and run 'sessionctl fsck DATA_DIR'\n", n)
	}
	return nil
}

// listSessions returns every session a listing yields; op names the
// command in errors.
func (e *env) listSessions(ctx context.Context, c sessiondv1.SessionStoreServiceClient, op string, req *sessiondv1.ListSessionsRequest) ([]*sessiondv1.Session, error) {
	stream, err := c.ListSessions(ctx, req)
	if err != nil {
		return nil, e.rpcError(op, err)
	}
	var ss []*sessiondv1.Session
	err = recvEach(e, op, stream, func(resp *sessiondv1.ListSessionsResponse) error {
		ss = append(ss, resp.GetSession())
		return nil
	})
	return ss, err
}

// lsCheckers bounds the GetSession calls ls has in flight.
const lsCheckers = 8

// unreadable asks the daemon about each listed session, a few at a time,
// and returns per session "damaged" if the daemon answers DATA_LOSS for it
// (a damage it has found: at start-up, or by a failed load), "error: CODE"
// for another failure, and "" when it is readable. A listing carries no
// such mark, so ls asks; deleted meanwhile counts as readable.
func (e *env) unreadable(ctx context.Context, c sessiondv1.SessionStoreServiceClient, ss []*sessiondv1.Session) []string {
	out := make([]string, len(ss))
	var g errgroup.Group
	g.SetLimit(lsCheckers)
	for i, s := range ss {
		g.Go(func() error {
			_, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: e.idRef(s.GetId())})
			switch status.Code(err) {
			case codes.OK, codes.NotFound:
			case codes.DataLoss:
				out[i] = "damaged"
			default:
				out[i] = "error: " + codeName(status.Code(err))
			}
			return nil
		})
	}
	_ = g.Wait() // every call reports nil; its outcome is in out
	return out
}

// printStream prints each frame of a listing's stream: as a JSON line (of
// what jsonOf picks) with --json, else as a row of a table under header.
// op names the command in errors.
func printStream[F any](e *env, op string, stream grpc.ServerStreamingClient[F], header []string,
	jsonOf func(*F) proto.Message, row func(*F) []string) error {
	var tb *table
	if !e.json {
		tb = newTable(e.stdout, header...)
	}
	err := recvEach(e, op, stream, func(frame *F) error {
		if e.json {
			return writeJSONLine(e.stdout, jsonOf(frame))
		}
		return tb.row(row(frame)...)
	})
	if err != nil || tb == nil {
		return err
	}
	return tb.flush()
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
	c, err := e.dial(ctx)
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

func showCmd(e *env) *cobra.Command {
	var tail int64
	var view string
	cmd := &cobra.Command{
		Use:               "show ID|ALIAS",
		Short:             "show a session's header and conversation",
		Args:              exactArgs(1),
		ValidArgsFunction: e.completeSessions,
		RunE: func(cmd *cobra.Command, pos []string) error {
			if tail < 0 {
				return usageErrorf("show: --tail must not be negative")
			}
			lv, err := parseView("show", view)
			if err != nil {
				return err
			}
			sa, err := e.parseSessionArg(pos[0])
			if err != nil {
				return err
			}
			req := &sessiondv1.LoadSessionRequest{Ref: sa.ref, View: lv}
			if tail > 0 {
				req.Limit, req.Tail = tail, true
			}
			sess, msgs, err := e.loadSession(cmd.Context(), "show "+sa.text, req)
			if err != nil {
				return err
			}
			if e.json {
				sess.Messages = msgs
				return writeJSONLine(e.stdout, sess)
			}
			w := bufio.NewWriter(e.stdout)
			writeHeader(w, sess)
			total := sess.GetMessageCount()
			if c := sess.GetCompaction(); lv == sessiondv1.LoadView_LOAD_VIEW_CONTEXT && c != nil {
				total = sess.GetContextMessageCount()
				fmt.Fprintf(w, "\n(context view: message 0 is the summary standing for the first %d messages)\n", c.GetThroughMessageCount())
			}
			first := max(total-int64(len(msgs)), 0)
			if first > 0 {
				fmt.Fprintf(w, "\n(%d earlier messages not shown)\n", first)
			}
			writeConversation(w, first, msgs)
			return w.Flush()
		},
	}
	cmd.Flags().Int64Var(&tail, "tail", 0, "show only the last N messages (0: all)")
	cmd.Flags().StringVar(&view, "view", "full", "full (every message) or context (the latest compaction's summary, then the messages after it)")
	return cmd
}

// parseView reads a --view flag: full or context.
func parseView(op, v string) (sessiondv1.LoadView, error) {
	switch v {
	case "full", "":
		return sessiondv1.LoadView_LOAD_VIEW_FULL, nil
	case "context":
		return sessiondv1.LoadView_LOAD_VIEW_CONTEXT, nil
	}
	return 0, usageErrorf("%s: --view %q: want full or context", op, v)
}

// confirm asks the person at the terminal whether to go on with what
// question describes. Without a terminal on stdin it refuses before any
// change, so that a script that forgot --yes is not left waiting for an
// answer nobody will type.
func (e *env) confirm(in *bufio.Reader, op, question string) (bool, error) {
	fmt.Fprintf(e.stderr, "%s [y/N] ", question)
	answer, err := in.ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("%s: read answer: %w", op, err)
	}
	a := strings.ToLower(strings.TrimSpace(answer))
	return a == "y" || a == "yes", nil
}

// needYes fails with a usage error when a change needs confirmation and
// nobody can give it.
func (e *env) needYes(op string, yes bool) error {
	if !yes && !terminal(e.stdin) {
		return usageErrorf("%s: refusing to change sessions without confirmation: stdin is not a terminal; pass --yes", op)
	}
	return nil
}

// describe names a session in a confirmation question.
func describe(s *sessiondv1.Session) string {
	return fmt.Sprintf("session %s (alias %s, title %s, %d messages, updated %s)", s.GetId(),
		strconv.Quote(safeLine(s.GetAlias())), strconv.Quote(clip(s.GetTitle(), 60)), s.GetMessageCount(), fmtTime(s.GetUpdatedAt()))
}

func rmCmd(e *env) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:               "rm ID|ALIAS...",
		Short:             "delete sessions (asks unless --yes)",
		Args:              rangeArgs(1, -1),
		ValidArgsFunction: e.completeSessions,
		RunE: func(cmd *cobra.Command, pos []string) error {
			ctx := cmd.Context()
			sas := make([]sessionArg, len(pos))
			for i, p := range pos {
				var err error
				if sas[i], err = e.parseSessionArg(p); err != nil {
					return err
				}
			}
			if err := e.needYes("rm", yes); err != nil {
				return err
			}
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			in := bufio.NewReader(e.stdin)
			for _, sa := range sas {
				op := "rm " + sa.text
				resp, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: sa.ref})
				if err != nil {
					return e.rpcError(op, err)
				}
				s := resp.GetSession()
				if !yes {
					ok, err := e.confirm(in, op, "Delete "+describe(s)+"?")
					if err != nil {
						return err
					}
					if !ok {
						fmt.Fprintf(e.stderr, "kept %s\n", safeLine(sa.text))
						continue
					}
				}
				// Delete what was looked up: by id, so that an alias moved
				// meanwhile to another session does not redirect the delete.
				if _, err := c.DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: e.idRef(s.GetId())}); err != nil {
					return e.rpcError(op, err)
				}
				if e.json {
					if err := writeJSONLine(e.stdout, s); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(e.stdout, "deleted %s\n", safeLine(sa.text))
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "delete without asking")
	return cmd
}

func renameCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:               "rename ID|ALIAS NEWALIAS",
		Short:             `set a session's alias ("" removes it)`,
		Args:              exactArgs(2),
		ValidArgsFunction: e.completeFirstSession,
		RunE: func(cmd *cobra.Command, pos []string) error {
			sa, err := e.parseSessionArg(pos[0])
			if err != nil {
				return err
			}
			alias := pos[1]
			if err := optionalAlias("rename: NEWALIAS", alias); err != nil {
				return err
			}
			c, err := e.dial(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.UpdateSession(cmd.Context(), &sessiondv1.UpdateSessionRequest{
				Ref:        sa.ref,
				Session:    &sessiondv1.Session{Alias: alias},
				UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"alias"}},
			})
			if err != nil {
				return e.rpcError("rename "+sa.text, err)
			}
			if alias == "" {
				return e.printResult(resp.GetSession(), "%s has no alias now\n", resp.GetSession().GetId())
			}
			return e.printResult(resp.GetSession(), "%s is now %s\n", resp.GetSession().GetId(), alias)
		},
	}
}

func forkCmd(e *env) *cobra.Command {
	var n int64
	var alias, title string
	cmd := &cobra.Command{
		Use:               "fork ID|ALIAS",
		Short:             "copy a session's first N messages into a new session",
		Args:              exactArgs(1),
		ValidArgsFunction: e.completeSessions,
		RunE: func(cmd *cobra.Command, pos []string) error {
			if n < 0 {
				return usageErrorf("fork: --messages must not be negative")
			}
			if err := optionalAlias("fork: --alias", alias); err != nil {
				return err
			}
			sa, err := e.parseSessionArg(pos[0])
			if err != nil {
				return err
			}
			c, err := e.dial(cmd.Context())
			if err != nil {
				return err
			}
			resp, err := c.ForkSession(cmd.Context(), &sessiondv1.ForkSessionRequest{Ref: sa.ref, MessageCount: n, Alias: alias, Title: title})
			if err != nil {
				return e.rpcError("fork "+sa.text, err)
			}
			return e.printResult(resp.GetSession(), "%s\n", resp.GetSession().GetId())
		},
	}
	f := cmd.Flags()
	f.Int64Var(&n, "messages", 0, "copy the first N messages (0: all)")
	f.StringVar(&alias, "alias", "", "alias of the new session")
	f.StringVar(&title, "title", "", "title of the new session (default: the source's)")
	return cmd
}

func rewindCmd(e *env) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:               "rewind ID|ALIAS N",
		Short:             "keep a session's first N messages, dropping the rest (asks unless --yes)",
		Args:              exactArgs(2),
		ValidArgsFunction: e.completeFirstSession,
		RunE: func(cmd *cobra.Command, pos []string) error {
			ctx := cmd.Context()
			sa, err := e.parseSessionArg(pos[0])
			if err != nil {
				return err
			}
			n, err := parseCount("rewind: N", pos[1])
			if err != nil {
				return err
			}
			if err := e.needYes("rewind", yes); err != nil {
				return err
			}
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			op := "rewind " + sa.text
			req := &sessiondv1.RewindSessionRequest{Ref: sa.ref, MessageCount: n}
			if !yes {
				got, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: sa.ref})
				if err != nil {
					return e.rpcError(op, err)
				}
				s := got.GetSession()
				q := fmt.Sprintf("Rewind %s to its first %d messages, dropping %d?", describe(s), n, max(s.GetMessageCount()-n, 0))
				ok, err := e.confirm(bufio.NewReader(e.stdin), op, q)
				if err != nil {
					return err
				}
				if !ok {
					fmt.Fprintf(e.stderr, "kept %s as it was\n", safeLine(sa.text))
					return nil
				}
				// Rewind what was shown: by id, and only if it has not
				// changed since.
				req.Ref, req.ExpectedRevision = e.idRef(s.GetId()), s.GetRevision()
			}
			resp, err := c.RewindSession(ctx, req)
			if err != nil {
				return e.rpcError(op, err)
			}
			s := resp.GetSession()
			return e.printResult(s, "%s now has %d messages (revision %d)\n", safeLine(displayName(s)), s.GetMessageCount(), s.GetRevision())
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "rewind without asking")
	return cmd
}

// snippetContext is how many bytes of text storage.Snippet keeps on each
// side of the query: a snippet with that much before (after) the query was
// cut there, likely inside a word.
const snippetContext = 60

// snippetCell shows a search hit's snippet in whole words: a word the
// daemon's cut split is dropped for "…", and the cell is at most
// snippetWidth characters, cut between words.
func snippetCell(snippet, query string) string {
	if i := strings.Index(strings.ToLower(snippet), strings.ToLower(query)); i >= 0 {
		end := i + len(query)
		head, match, tail := snippet[:i], snippet[i:end], snippet[end:]
		if len(head) >= snippetContext {
			if j := strings.IndexFunc(head, unicode.IsSpace); j >= 0 {
				head = "…" + strings.TrimLeftFunc(head[j:], unicode.IsSpace)
			}
		}
		if len(tail) >= snippetContext {
			if j := strings.LastIndexFunc(tail, unicode.IsSpace); j >= 0 {
				tail = strings.TrimRightFunc(tail[:j], unicode.IsSpace) + "…"
			}
		}
		snippet = head + match + tail
	}
	return clipWords(snippet, snippetWidth)
}

// snippetWidth bounds the SNIPPET column.
const snippetWidth = 120

// clipWords is clip that cuts between words when it must cut.
func clipWords(s string, n int) string {
	r := []rune(safeLine(strings.Join(strings.Fields(s), " ")))
	if len(r) <= n {
		return string(r)
	}
	cut := string(r[:n-1])
	if j := strings.LastIndex(cut, " "); j > 0 {
		cut = cut[:j]
	}
	return strings.TrimSuffix(cut, "…") + "…"
}

func searchCmd(e *env) *cobra.Command {
	var limit int64
	cmd := &cobra.Command{
		Use:   "search QUERY",
		Short: "find sessions and messages containing a text",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			if pos[0] == "" {
				return usageErrorf("search: QUERY is empty")
			}
			if limit < 0 {
				return usageErrorf("search: --limit must not be negative")
			}
			c, err := e.dial(cmd.Context())
			if err != nil {
				return err
			}
			stream, err := c.SearchSessions(cmd.Context(), &sessiondv1.SearchSessionsRequest{Namespace: e.namespace, Query: pos[0], Limit: limit})
			if err != nil {
				return e.rpcError("search", err)
			}
			return printStream(e, "search", stream, []string{"SESSION", "MESSAGE", "SNIPPET"},
				func(hit *sessiondv1.SearchSessionsResponse) proto.Message { return hit },
				func(hit *sessiondv1.SearchSessionsResponse) []string {
					idx := "-"
					if hit.GetMessageIndex() >= 0 {
						idx = fmt.Sprint(hit.GetMessageIndex())
					}
					return []string{safeLine(displayName(hit.GetSession())), idx, snippetCell(hit.GetSnippet(), pos[0])}
				})
		},
	}
	cmd.Flags().Int64Var(&limit, "limit", 0, "show at most N hits (0: all)")
	return cmd
}
