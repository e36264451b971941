package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sessiond/sessiond/client/convert"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// protoJSON is a proto object as compact proto3 JSON, on one line.
func protoJSON(m proto.Message) (json.RawMessage, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %T as JSON: %w", m, err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, fmt.Errorf("compact JSON: %w", err)
	}
	return buf.Bytes(), nil
}

func exportCmd(e *env) *cobra.Command {
	var all bool
	var output, format, model, view string
	var maxTokens int64
	cmd := &cobra.Command{
		Use:   "export ID|ALIAS | --all",
		Short: "write sessions as JSON lines (for import), Markdown, or another tool's request format",
		Long: `export writes sessions as JSON lines, the format import reads back losslessly,
or as Markdown for people. With --all it exports every session of the
namespace: a damaged session (DATA_LOSS) does not stop it; each is named on
stderr, the others are exported, and the exit code is 1 at the end.

With --format openai-chat (a Chat Completions request body),
openai-responses (a Responses API request body with input items) or
anthropic (a Messages API request body), it writes one session as the JSON
another tool sends to a model. What the format cannot hold (metadata,
usage, reasoning signatures, blobs of a kind it has no block for...) is
named on stderr, one warning per field; the README has the mapping. A tool
call left unanswered gets the daemon's synthetic "interrupted" result
(close_open_tool_calls), as a model API refuses the history without it.
With --view context such a format holds what to send a model after a
compaction: the latest compaction's summary, then the messages after it.
JSON lines and Markdown always hold every message.`,
		Args:              rangeArgs(0, 1),
		ValidArgsFunction: e.completeSessions,
		RunE: func(cmd *cobra.Command, pos []string) error {
			switch {
			case all && len(pos) == 1:
				return usageErrorf("export: give either ID|ALIAS or --all, not both")
			case !all && len(pos) == 0:
				return usageErrorf("export: give ID|ALIAS, or --all for the whole namespace")
			}
			f, conversation, err := conversationFormat("export", format, "markdown", "md")
			if err != nil {
				return err
			}
			markdown := f == ""
			switch {
			case conversation && all:
				return usageErrorf("export: --format %s writes one conversation; give ID|ALIAS instead of --all", f)
			case (model != "" || maxTokens != 0) && !conversation:
				return usageErrorf("export: --model and --max-tokens go with --format openai-chat, openai-responses or anthropic")
			case maxTokens < 0:
				return usageErrorf("export: --max-tokens must not be negative")
			}
			lv, err := parseView("export", view)
			if err != nil {
				return err
			}
			if lv == sessiondv1.LoadView_LOAD_VIEW_CONTEXT && !conversation {
				return usageErrorf("export: --view context goes with --format openai-chat, openai-responses or anthropic; jsonl and markdown hold every message")
			}
			var single *sessionArg
			if !all {
				sa, err := e.parseSessionArg(pos[0])
				if err != nil {
					return err
				}
				single = &sa
			}
			if conversation {
				return e.exportConversation(cmd.Context(), *single, output, f, lv, convert.ExportOptions{Model: model, MaxTokens: maxTokens})
			}
			return e.export(cmd.Context(), single, output, markdown)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&all, "all", false, "export every session of the namespace")
	f.StringVarP(&output, "output", "o", "", "write to FILE instead of stdout (written whole, then renamed into place)")
	f.StringVar(&format, "format", "jsonl", "jsonl (for import), markdown (for people), openai-chat, openai-responses or anthropic")
	f.StringVar(&model, "model", "", "the request's model for a conversation format (default: the session's newest)")
	f.Int64Var(&maxTokens, "max-tokens", 0, "the request's output token limit for a conversation format (anthropic requires one)")
	f.StringVar(&view, "view", "full", "full, or context for a conversation format: the latest compaction's summary, then the messages after it")
	return cmd
}

// export writes one session (single) or all of the namespace's.
func (e *env) export(ctx context.Context, single *sessionArg, output string, markdown bool) error {
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	var refs []*sessiondv1.SessionRef
	if single != nil {
		refs = []*sessiondv1.SessionRef{single.ref}
	} else if refs, err = e.listAll(ctx, c); err != nil {
		return err
	}

	out, commit, err := openOutput(e, output)
	if err != nil {
		return err
	}
	defer commit(false)
	w := bufio.NewWriterSize(out, 1<<20)
	x := &exporter{e: e, c: c, w: w, lines: convert.NewJSONLWriter(w), markdown: markdown, prog: newProgress(e, "exporting"), msgProgress: single != nil}
	defer x.prog.finish()
	if err := x.header(); err != nil {
		return err
	}
	var damaged []string
	for i, ref := range refs {
		x.prog.update(int64(i), int64(len(refs)), "sessions")
		if err := x.session(ctx, ref); err != nil {
			if single != nil {
				return fmt.Errorf("export %s: %w", single.text, err)
			}
			switch grpcCode(err, exitCode(err)) {
			case codes.NotFound:
				// Deleted since the listing: not part of the namespace any more.
				continue
			case codes.DataLoss:
				// Nothing of it was written (the daemon refuses a damaged
				// session before its first frame): name it, export the rest.
				x.prog.finish()
				damaged = append(damaged, ref.GetId())
				e.notice(map[string]any{"damaged": ref.GetId(), "message": oneLine(err.Error())},
					"sessionctl: export: session %s is damaged, not exported: %s", ref.GetId(), oneLine(err.Error()))
				continue
			}
			return fmt.Errorf("export: %w", err)
		}
	}
	x.prog.update(int64(len(refs)), int64(len(refs)), "sessions")
	if err := x.trailer(); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("export: write: %w", err)
	}
	if err := commit(true); err != nil {
		return err
	}
	x.prog.finish()
	if output != "" && output != "-" {
		if e.json {
			_ = json.NewEncoder(e.stdout).Encode(map[string]any{"exported": x.count, "output": output, "damaged": len(damaged)})
		} else {
			fmt.Fprintf(e.stderr, "exported %d sessions to %s\n", x.count, output)
		}
	}
	if len(damaged) > 0 {
		return &exitErr{code: exitError, grpc: codes.DataLoss, err: fmt.Errorf(
			"export: %d damaged sessions were not exported (%s); the other %d were; stop sessiond and run 'sessionctl fsck DATA_DIR'",
			len(damaged), strings.Join(damaged, ", "), x.count)}
	}
	return nil
}

// notice tells the operator something on stderr while a command carries
// on: the line for people, or with --json the object.
func (e *env) notice(obj map[string]any, format string, a ...any) {
	if e.json {
		b, _ := json.Marshal(obj)
		fmt.Fprintf(e.stderr, "%s\n", b)
		return
	}
	fmt.Fprintf(e.stderr, format+"\n", a...)
}

// listAll names every session of the namespace, oldest first, so that an
// import creates a fork's parent before the fork.
func (e *env) listAll(ctx context.Context, c sessiondv1.SessionStoreServiceClient) ([]*sessiondv1.SessionRef, error) {
	ss, err := e.listSessions(ctx, c, "export", &sessiondv1.ListSessionsRequest{Namespace: e.namespace})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ss, func(a, b *sessiondv1.Session) int {
		return cmp.Or(a.GetCreatedAt().AsTime().Compare(b.GetCreatedAt().AsTime()), strings.Compare(a.GetId(), b.GetId()))
	})
	refs := make([]*sessiondv1.SessionRef, len(ss))
	for i, s := range ss {
		refs[i] = e.idRef(s.GetId())
	}
	return refs, nil
}

// openOutput returns stdout, or a temp file beside path that commit(true)
// renames over path, so that a failed export never leaves a half file under
// the name asked for. commit(false) removes the temp file; it is safe to
// call after commit(true).
func openOutput(e *env, path string) (io.Writer, func(ok bool) error, error) {
	if path == "" || path == "-" {
		return e.stdout, func(bool) error { return nil }, nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, nil, fmt.Errorf("export: create %s: %w", path, err)
	}
	done := false
	commit := func(ok bool) error {
		if done {
			return nil
		}
		done = true
		if !ok {
			f.Close()
			os.Remove(f.Name())
			return nil
		}
		if err := f.Sync(); err != nil {
			f.Close()
			os.Remove(f.Name())
			return fmt.Errorf("export: sync %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			os.Remove(f.Name())
			return fmt.Errorf("export: close %s: %w", path, err)
		}
		if err := os.Rename(f.Name(), path); err != nil {
			os.Remove(f.Name())
			return fmt.Errorf("export: rename into %s: %w", path, err)
		}
		return nil
	}
	return f, commit, nil
}

type exporter struct {
	e           *env
	c           sessiondv1.SessionStoreServiceClient
	w           *bufio.Writer
	lines       *convert.JSONLWriter
	markdown    bool
	prog        *progress
	msgProgress bool // a single session: count its messages instead
	count       int64
}

func (x *exporter) header() error {
	if x.markdown {
		return nil
	}
	return x.lines.Header(x.e.namespace, ctlVersion(), time.Now())
}

func (x *exporter) trailer() error {
	if x.markdown {
		return nil
	}
	return x.lines.Trailer(x.count)
}

// session streams one session from LoadSession to the output, frame by
// frame, so that a session bigger than memory can still be exported.
func (x *exporter) session(ctx context.Context, ref *sessiondv1.SessionRef) error {
	stream, err := x.c.LoadSession(ctx, &sessiondv1.LoadSessionRequest{Ref: ref})
	if err != nil {
		return x.e.rpcError("load", err)
	}
	var sess *sessiondv1.Session
	var n int64
	err = recvEach(x.e, "load", stream, func(resp *sessiondv1.LoadSessionResponse) error {
		if sess == nil {
			if sess = resp.GetSession(); sess == nil {
				return errors.New("the daemon sent messages before the session header")
			}
			if err := x.sessionStart(sess); err != nil {
				return err
			}
		}
		for _, m := range resp.GetMessages() {
			if err := x.message(sess, n, m); err != nil {
				return err
			}
			n++
		}
		if x.msgProgress {
			x.prog.update(n, sess.GetMessageCount(), "messages")
		}
		return nil
	})
	if err != nil {
		return err
	}
	if sess == nil {
		return errors.New("the daemon sent no session header")
	}
	if n != sess.GetMessageCount() {
		return fmt.Errorf("session %s: received %d messages, its header says %d; export again", sess.GetId(), n, sess.GetMessageCount())
	}
	x.count++
	if x.markdown {
		return nil
	}
	if c := sess.GetCompaction(); c != nil {
		sum, err := x.summary(ctx, ref, sess.GetId(), c)
		if err != nil {
			return err
		}
		if err := x.lines.Summary(sess.GetId(), sum); err != nil {
			return err
		}
	}
	return x.lines.End(sess.GetId(), n)
}

// summary returns the summary of compaction c, which session id (named by
// ref) has: the first message of its context view, once that view is
// still of c.
func (x *exporter) summary(ctx context.Context, ref *sessiondv1.SessionRef, id string, c *sessiondv1.Compaction) (*sessiondv1.Message, error) {
	stream, err := x.c.LoadSession(ctx, &sessiondv1.LoadSessionRequest{Ref: ref, View: sessiondv1.LoadView_LOAD_VIEW_CONTEXT, Limit: 1})
	if err != nil {
		return nil, x.e.rpcError("load", err)
	}
	var sess *sessiondv1.Session
	var sum *sessiondv1.Message
	err = recvEach(x.e, "load", stream, func(resp *sessiondv1.LoadSessionResponse) error {
		if sess == nil {
			sess = resp.GetSession()
		}
		if ms := resp.GetMessages(); sum == nil && len(ms) > 0 {
			sum = ms[0]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if got := sess.GetCompaction(); got.GetRevision() != c.GetRevision() || sum.GetId() != c.GetSummaryMessageId() {
		return nil, fmt.Errorf("session %s was compacted again while it was exported; export again", id)
	}
	return sum, nil
}

func (x *exporter) sessionStart(s *sessiondv1.Session) error {
	if x.markdown {
		writeMarkdownHeader(x.w, s, x.count > 0)
		return nil
	}
	return x.lines.Session(s)
}

func (x *exporter) message(s *sessiondv1.Session, i int64, m *sessiondv1.Message) error {
	if x.markdown {
		writeMarkdownMessage(x.w, i, m)
		return nil
	}
	return x.lines.Message(s.GetId(), i, m)
}

func writeMarkdownHeader(w io.Writer, s *sessiondv1.Session, separate bool) {
	if separate {
		fmt.Fprint(w, "\n---\n\n")
	}
	title := cmp.Or(s.GetTitle(), displayName(s))
	fmt.Fprintf(w, "# %s\n\n", safeLine(oneLine(title)))
	item := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "- **%s:** %s\n", k, safeLine(v))
		}
	}
	item("id", "`"+s.GetId()+"`")
	if s.GetAlias() != "" {
		item("alias", "`"+s.GetAlias()+"`")
	}
	item("namespace", s.GetNamespace())
	item("created", fmtTime(s.GetCreatedAt()))
	item("updated", fmtTime(s.GetUpdatedAt()))
	item("messages", fmt.Sprint(s.GetMessageCount()))
	if p := s.GetParent(); p != nil {
		item("forked from", fmt.Sprintf("`%s` (first %d messages)", p.GetSessionId(), p.GetMessageCount()))
	}
	item("labels", sortedPairs(s.GetLabels()))
	item("metadata", sortedPairs(s.GetMetadata()))
	if s.GetSummary() != "" {
		fmt.Fprintf(w, "\n> %s\n", strings.ReplaceAll(strings.TrimSpace(safeText(s.GetSummary())), "\n", "\n> "))
	}
}

func writeMarkdownMessage(w io.Writer, i int64, m *sessiondv1.Message) {
	who := roleName(m.GetRole())
	if m.GetName() != "" {
		who += " (" + m.GetName() + ")"
	}
	if m.GetToolCallId() != "" {
		who += " — result of `" + m.GetToolCallId() + "`"
	}
	fmt.Fprintf(w, "\n## %d. %s · %s\n\n", i, safeLine(who), fmtTime(m.GetCreatedAt()))
	if r := m.GetReasoning(); r.GetText() != "" {
		fmt.Fprintf(w, "<details><summary>reasoning</summary>\n\n%s\n\n</details>\n\n", safeText(r.GetText()))
	}
	if m.GetContent() != "" {
		fmt.Fprintf(w, "%s\n", strings.TrimRight(safeText(m.GetContent()), "\n"))
	}
	for _, p := range m.GetParts() {
		switch k := p.GetKind().(type) {
		case *sessiondv1.ContentPart_Text:
			fmt.Fprintf(w, "\n%s\n", strings.TrimRight(safeText(k.Text), "\n"))
		case *sessiondv1.ContentPart_Json:
			fmt.Fprintf(w, "\n```json\n%s\n```\n", safeText(k.Json))
		case *sessiondv1.ContentPart_Blob:
			fmt.Fprintf(w, "\n*(%s, %d bytes)*\n", safeLine(k.Blob.GetMimeType()), len(k.Blob.GetData()))
		}
	}
	for _, tc := range m.GetToolCalls() {
		fmt.Fprintf(w, "\n**tool call** `%s` (`%s`):\n\n```json\n%s\n```\n", safeLine(tc.GetName()), safeLine(tc.GetId()), safeText(tc.GetArguments()))
	}
}
