package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// rpcError turns a failed call into one line that says what went wrong and
// what to do, with the exit code scripts expect (3 for NOT_FOUND).
func (e *env) rpcError(op string, err error) error {
	s, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", op, err)
	}
	msg := s.Message()
	switch s.Code() {
	case codes.NotFound:
		// The daemon's message names the session as it saw it; the op
		// already names it as the user typed it.
		return notFoundErrorf("%s: no such session in %s; 'sessionctl ls' lists the sessions", op, e.nsLabel())
	case codes.Unavailable:
		return fmt.Errorf("%s: cannot reach sessiond at %s (%s); start it, or point --addr or SESSIOND_ADDR at it", op, e.addr, msg)
	case codes.DataLoss:
		return fmt.Errorf("%s: %s; the stored session is damaged: stop sessiond and run 'sessionctl fsck DATA_DIR'", op, msg)
	case codes.Aborted:
		return fmt.Errorf("%s: %s; the session changed meanwhile, run the command again", op, msg)
	case codes.Unauthenticated, codes.PermissionDenied:
		return fmt.Errorf("%s: %s; the daemon refused this client", op, msg)
	case codes.Unimplemented:
		return fmt.Errorf("%s: %s; the daemon is too old for this command, upgrade sessiond", op, msg)
	case codes.Canceled:
		return fmt.Errorf("%s: interrupted", op)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: timed out (%s); check that sessiond is responsive", op, msg)
	case codes.InvalidArgument, codes.AlreadyExists, codes.ResourceExhausted, codes.OutOfRange:
		return fmt.Errorf("%s: %s", op, msg)
	default:
		return fmt.Errorf("%s: %s (%s)", op, msg, s.Code())
	}
}

// writeJSONLine writes m as one line of proto3 JSON. protojson varies its
// whitespace on purpose; compacting makes the output stable for scripts.
func writeJSONLine(w io.Writer, m proto.Message) error {
	b, err := protoJSON(m)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// fmtTime renders a timestamp for people, in local time; "-" when unset.
func fmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().Local().Format("2006-01-02 15:04:05")
}

// displayName is how a session is named in tables: its alias, else its id.
func displayName(s *sessiondv1.Session) string {
	if s.GetAlias() != "" {
		return s.GetAlias()
	}
	return s.GetId()
}

// clip shortens s to n runes on one line, for table cells.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func sortedPairs(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

func roleName(r sessiondv1.Role) string {
	switch r {
	case sessiondv1.Role_ROLE_SYSTEM:
		return "system"
	case sessiondv1.Role_ROLE_USER:
		return "user"
	case sessiondv1.Role_ROLE_ASSISTANT:
		return "assistant"
	case sessiondv1.Role_ROLE_TOOL:
		return "tool"
	default:
		return fmt.Sprintf("role(%d)", int32(r))
	}
}

// writeHeader prints a session's metadata as "key: value" lines.
func writeHeader(w io.Writer, s *sessiondv1.Session) {
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%-10s %s\n", k+":", v)
		}
	}
	line("id", s.GetId())
	line("alias", s.GetAlias())
	line("namespace", s.GetNamespace())
	line("title", s.GetTitle())
	line("created", fmtTime(s.GetCreatedAt()))
	line("updated", fmtTime(s.GetUpdatedAt()))
	line("revision", fmt.Sprint(s.GetRevision()))
	line("messages", fmt.Sprint(s.GetMessageCount()))
	if p := s.GetParent(); p != nil {
		line("parent", fmt.Sprintf("%s (first %d messages)", p.GetSessionId(), p.GetMessageCount()))
	}
	line("labels", sortedPairs(s.GetLabels()))
	line("metadata", sortedPairs(s.GetMetadata()))
	if s.GetSummary() != "" {
		fmt.Fprintf(w, "summary:\n%s\n", indent(s.GetSummary(), "  "))
	}
}

func indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// conversation renders messages as a person reads them: who spoke when, what
// they said, and each tool call with its result right beside it. first is
// the index of msgs[0] in the session (not 0 with --tail).
type conversation struct {
	w     io.Writer
	first int64
	// results maps a tool-call id to its result message, so a call is shown
	// with its answer; shown records results already printed that way.
	results map[string]*sessiondv1.Message
	shown   map[*sessiondv1.Message]bool
	index   map[*sessiondv1.Message]int64
}

func writeConversation(w io.Writer, first int64, msgs []*sessiondv1.Message) {
	c := &conversation{w: w, first: first, results: map[string]*sessiondv1.Message{},
		shown: map[*sessiondv1.Message]bool{}, index: map[*sessiondv1.Message]int64{}}
	for i, m := range msgs {
		c.index[m] = first + int64(i)
		if m.GetRole() == sessiondv1.Role_ROLE_TOOL && m.GetToolCallId() != "" {
			if _, dup := c.results[m.GetToolCallId()]; !dup {
				c.results[m.GetToolCallId()] = m
			}
		}
	}
	for i, m := range msgs {
		if c.shown[m] {
			continue
		}
		c.message(first+int64(i), m)
	}
}

func (c *conversation) message(index int64, m *sessiondv1.Message) {
	who := roleName(m.GetRole())
	if m.GetName() != "" {
		who += " (" + m.GetName() + ")"
	}
	if m.GetRole() == sessiondv1.Role_ROLE_TOOL && m.GetToolCallId() != "" {
		who += " result of " + m.GetToolCallId()
	}
	fmt.Fprintf(c.w, "\n[%d] %s  %s\n", index, fmtTime(m.GetCreatedAt()), who)
	c.body(m, "    ")
	for _, tc := range m.GetToolCalls() {
		fmt.Fprintf(c.w, "    → tool call %s [%s] %s\n", tc.GetName(), tc.GetId(), tc.GetArguments())
		if r, ok := c.results[tc.GetId()]; ok && !c.shown[r] {
			c.shown[r] = true
			fmt.Fprintf(c.w, "      ← result [%d] %s\n", c.index[r], fmtTime(r.GetCreatedAt()))
			c.body(r, "        ")
		} else if !ok {
			fmt.Fprintf(c.w, "      ← (no result in view)\n")
		}
	}
}

// body prints a message's reasoning, content and parts, indented.
func (c *conversation) body(m *sessiondv1.Message, pre string) {
	if r := m.GetReasoning(); r.GetText() != "" {
		fmt.Fprintf(c.w, "%s(reasoning)\n%s\n", pre, indent(r.GetText(), pre+"  "))
	}
	if m.GetContent() != "" {
		fmt.Fprintln(c.w, indent(m.GetContent(), pre))
	}
	for _, p := range m.GetParts() {
		switch k := p.GetKind().(type) {
		case *sessiondv1.ContentPart_Text:
			fmt.Fprintln(c.w, indent(k.Text, pre))
		case *sessiondv1.ContentPart_Json:
			fmt.Fprintf(c.w, "%s(json) %s\n", pre, k.Json)
		case *sessiondv1.ContentPart_Blob:
			fmt.Fprintf(c.w, "%s(%s, %d bytes)\n", pre, k.Blob.GetMimeType(), len(k.Blob.GetData()))
		}
	}
}

// parseSince reads --since: a duration back from now ("36h") or an RFC3339
// time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			d = -d
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, usageErrorf("--since %q is neither a duration (36h, 90m) nor an RFC3339 time (2025-01-02T15:04:05Z)", s)
}
