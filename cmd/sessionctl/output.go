package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// rpcError turns a failed call into one line that says what went wrong and
// what to do, with the exit code scripts expect (3 for NOT_FOUND) and the
// call's gRPC code for --json errors.
func (e *env) rpcError(op string, err error) error {
	s, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", op, err)
	}
	msg := s.Message()
	var out error
	switch s.Code() {
	case codes.NotFound:
		// The daemon's message names the session as it saw it; the op
		// already names it as the user typed it.
		return notFoundErrorf("%s: no such session in %s; 'sessionctl ls' lists the sessions", op, e.nsLabel())
	case codes.Unavailable:
		out = fmt.Errorf("%s: %s", op, e.unreachableHint(msg))
	case codes.DataLoss:
		out = fmt.Errorf("%s: %s; the stored session is damaged: stop sessiond and run 'sessionctl fsck DATA_DIR'", op, msg)
	case codes.Aborted:
		out = fmt.Errorf("%s: %s; the session changed meanwhile, run the command again", op, msg)
	case codes.Unauthenticated:
		out = fmt.Errorf("%s: %s; give --token (or set SESSIOND_TOKEN) with a token of the daemon's --auth-tokens file", op, msg)
	case codes.PermissionDenied:
		out = fmt.Errorf("%s: %s; %s", op, msg, e.permissionHint(msg))
	case codes.Unimplemented:
		out = fmt.Errorf("%s: %s; the daemon is too old for this command, upgrade sessiond", op, msg)
	case codes.Canceled:
		out = fmt.Errorf("%s: interrupted", op)
	case codes.DeadlineExceeded:
		out = fmt.Errorf("%s: timed out (%s); check that sessiond is responsive, or raise --timeout", op, msg)
	case codes.InvalidArgument, codes.AlreadyExists, codes.ResourceExhausted, codes.OutOfRange:
		out = fmt.Errorf("%s: %s", op, msg)
	default:
		out = fmt.Errorf("%s: %s (%s)", op, msg, s.Code())
	}
	return &exitErr{code: exitError, grpc: s.Code(), err: out}
}

// unreachableHint explains an UNAVAILABLE answer by its likely cause: a
// daemon that closes a plaintext connection at once serves TLS, one that
// answers TLS with plaintext does not, and a refused connection means that
// nothing listens at --addr.
func (e *env) unreachableHint(msg string) string {
	tlsOn := e.security.usesTLS()
	switch {
	case !tlsOn && (strings.Contains(msg, "server preface") || strings.Contains(msg, "connection reset")):
		return fmt.Sprintf("sessiond at %s closed the plaintext connection (%s); it serves TLS: add --tls-ca FILE (the CA of its --tls-cert), or --tls if a public CA signed it", e.addr, msg)
	case tlsOn && (strings.Contains(msg, "first record does not look like a TLS handshake") || strings.Contains(msg, "server preface")):
		return fmt.Sprintf("sessiond at %s does not serve TLS (%s); drop --tls, --tls-ca, --tls-cert and --tls-key", e.addr, msg)
	case tlsOn && (strings.Contains(msg, "certificate") || strings.Contains(msg, "tls:")):
		return fmt.Sprintf("TLS with sessiond at %s failed (%s); check --tls-ca (the CA of the daemon's --tls-cert), and --tls-cert/--tls-key if it asks for a client certificate", e.addr, msg)
	}
	if e.context != "" {
		return fmt.Sprintf("cannot reach sessiond at %s (%s, the address of context %s); start it ('sessiond'), or fix the context ('sessionctl config view'), or pick another with --context", e.addr, msg, e.context)
	}
	return fmt.Sprintf("cannot reach sessiond at %s (%s); start it ('sessiond'), or point --addr or SESSIOND_ADDR at it", e.addr, msg)
}

// permissionHint says what would let a refused call through. The daemon
// refuses a token for its role, for a call that needs every namespace, or
// for the namespace (server.Authorizer); only the last is cured by another
// namespace.
func (e *env) permissionHint(msg string) string {
	switch {
	case strings.Contains(msg, "has role"):
		return "the token's role is too low for this command: use a token with the role named, made with 'sessionctl token add --role write' (or admin)"
	case strings.Contains(msg, "every namespace"):
		return "use an admin token for every namespace: 'sessionctl token add --namespace \"*\" --role admin'"
	}
	return fmt.Sprintf("use a token allowed for %s, or another --namespace", e.nsLabel())
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

// printResult prints a command's result on stdout: v as one JSON line with
// --json (proto3 JSON for a proto message), else format for people.
func (e *env) printResult(v any, format string, a ...any) error {
	if e.json {
		if m, ok := v.(proto.Message); ok {
			return writeJSONLine(e.stdout, m)
		}
		return json.NewEncoder(e.stdout).Encode(v)
	}
	fmt.Fprintf(e.stdout, format, a...)
	return nil
}

// optionalAlias checks an alias a flag or argument gives, if any; what
// names it in the usage error.
func optionalAlias(what, alias string) error {
	if alias == "" {
		return nil
	}
	if err := storage.ValidateAlias(alias); err != nil {
		return usageErrorf("%s: %v", what, err)
	}
	return nil
}

// timeLayout is how times are shown to people: local time with its zone.
const timeLayout = "2006-01-02 15:04:05 MST"

// fmtTime renders a timestamp for people, in local time with its zone; "-"
// when unset.
func fmtTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().Local().Format(timeLayout)
}

// displayName is how a session is named in tables: its alias, else its id.
func displayName(s *sessiondv1.Session) string { return cmp.Or(s.GetAlias(), s.GetId()) }

// clip makes a client's string a table cell: on one line, control
// characters neutralised, at most n characters.
func clip(s string, n int) string {
	r := []rune(safeLine(strings.Join(strings.Fields(s), " ")))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n-1]) + "…"
}

func sortedPairs(m map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// roleName is the --role name of r (roleNames).
func roleName(r sessiondv1.Role) string {
	for name, v := range roleNames {
		if v == r {
			return name
		}
	}
	return fmt.Sprintf("role(%d)", int32(r))
}

// writeHeader prints a session's metadata as "key: value" lines.
func writeHeader(w io.Writer, s *sessiondv1.Session) {
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%-10s %s\n", k+":", safeLine(v))
		}
	}
	line("id", s.GetId())
	line("alias", s.GetAlias())
	line("namespace", s.GetNamespace())
	if s.GetTitleDerived() {
		line("title", s.GetTitle()+" (from the first user message)")
	} else {
		line("title", s.GetTitle())
	}
	line("created", fmtTime(s.GetCreatedAt()))
	line("updated", fmtTime(s.GetUpdatedAt()))
	line("revision", fmt.Sprint(s.GetRevision()))
	line("messages", fmt.Sprint(s.GetMessageCount()))
	if c := s.GetCompaction(); c != nil {
		line("compacted", fmt.Sprintf("the first %d messages (through %s) at revision %d; the context view holds %d",
			c.GetThroughMessageCount(), c.GetThroughMessageId(), c.GetRevision(), s.GetContextMessageCount()))
	}
	if u := s.GetUsage(); u != nil {
		line("usage", fmtUsage(u))
	}
	line("models", strings.Join(s.GetModels(), ", "))
	line("open call", strings.Join(s.GetOpenToolCallIds(), ", ")) // tool calls no result answers yet
	if d := s.GetExpireAfter(); d != nil {
		line("expires", "after "+fmtDays(d.AsDuration())+" without an update")
	}
	if p := s.GetParent(); p != nil {
		line("parent", fmt.Sprintf("%s (first %d messages)", p.GetSessionId(), p.GetMessageCount()))
	}
	line("labels", sortedPairs(s.GetLabels()))
	line("metadata", sortedPairs(s.GetMetadata()))
	if s.GetSummary() != "" {
		fmt.Fprintf(w, "summary:\n%s\n", indent(safeText(s.GetSummary()), "  "))
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
// they said, and each tool call with its result right beside it.
type conversation struct {
	w io.Writer
	// results maps a tool-call id to its result message, so a call is shown
	// with its answer; shown records results already printed that way.
	results map[string]*sessiondv1.Message
	shown   map[*sessiondv1.Message]bool
	index   map[*sessiondv1.Message]int64
}

// writeConversation renders msgs; first is the index of msgs[0] in the
// session (not 0 with --tail).
func writeConversation(w io.Writer, first int64, msgs []*sessiondv1.Message) {
	c := &conversation{w: w, results: map[string]*sessiondv1.Message{},
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
	if m.GetModel() != "" || m.GetUsage() != nil {
		var by []string
		if m.GetModel() != "" {
			by = append(by, m.GetModel())
		}
		if u := m.GetUsage(); u != nil {
			by = append(by, fmtUsage(u))
		}
		who += " [" + strings.Join(by, "; ") + "]"
	}
	fmt.Fprintf(c.w, "\n[%d] %s  %s\n", index, fmtTime(m.GetCreatedAt()), safeLine(who))
	c.body(m, "    ")
	for _, tc := range m.GetToolCalls() {
		fmt.Fprintf(c.w, "    → tool call %s [%s] %s\n", safeLine(tc.GetName()), safeLine(tc.GetId()), safeLine(tc.GetArguments()))
		if r, ok := c.results[tc.GetId()]; ok && !c.shown[r] {
			c.shown[r] = true
			fmt.Fprintf(c.w, "      ← result [%d] %s\n", c.index[r], fmtTime(r.GetCreatedAt()))
			c.body(r, "        ")
		} else if !ok {
			fmt.Fprintf(c.w, "      ← (no result in view)\n")
		}
	}
}

// fmtUsage says what a Usage counts: "320 in (100 cached), 42 out (4
// reasoning)", leaving out the zero parts in parentheses.
func fmtUsage(u *sessiondv1.Usage) string {
	s := fmt.Sprintf("%d in", u.GetInputTokens())
	if u.GetCachedInputTokens() > 0 {
		s += fmt.Sprintf(" (%d cached)", u.GetCachedInputTokens())
	}
	s += fmt.Sprintf(", %d out", u.GetOutputTokens())
	if u.GetReasoningTokens() > 0 {
		s += fmt.Sprintf(" (%d reasoning)", u.GetReasoningTokens())
	}
	return s
}

// fmtTokens is ls's token column: input/output, or "-" for none.
func fmtTokens(u *sessiondv1.Usage) string {
	if u.GetInputTokens() == 0 && u.GetOutputTokens() == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", u.GetInputTokens(), u.GetOutputTokens())
}

// fmtModels is ls's model column: the most recent model, and how many
// others, or "-".
func fmtModels(models []string) string {
	switch len(models) {
	case 0:
		return "-"
	case 1:
		return clip(models[0], 30)
	}
	return fmt.Sprintf("%s +%d", clip(models[0], 30), len(models)-1)
}

// fmtDays writes a duration in whole days when it is some ("30d", "1d12h0m0s"),
// else as Go does.
func fmtDays(d time.Duration) string {
	const day = 24 * time.Hour
	if d < day {
		return d.String()
	}
	if d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return fmt.Sprintf("%dd%s", d/day, d%day)
}

// body prints a message's reasoning, content and parts, indented.
func (c *conversation) body(m *sessiondv1.Message, pre string) {
	if r := m.GetReasoning(); r.GetText() != "" {
		fmt.Fprintf(c.w, "%s(reasoning)\n%s\n", pre, indent(safeText(r.GetText()), pre+"  "))
	}
	if m.GetContent() != "" {
		fmt.Fprintln(c.w, indent(safeText(m.GetContent()), pre))
	}
	for _, p := range m.GetParts() {
		switch k := p.GetKind().(type) {
		case *sessiondv1.ContentPart_Text:
			fmt.Fprintln(c.w, indent(safeText(k.Text), pre))
		case *sessiondv1.ContentPart_Json:
			fmt.Fprintf(c.w, "%s(json) %s\n", pre, safeLine(k.Json))
		case *sessiondv1.ContentPart_Blob:
			fmt.Fprintf(c.w, "%s(%s, %d bytes)\n", pre, safeLine(k.Blob.GetMimeType()), len(k.Blob.GetData()))
		}
	}
}

// parseSince reads --since: a duration back from now (a Go duration such
// as 36h or 90m, or whole days or weeks: 7d, 2w), an RFC3339 time, or a
// date (2026-11-01: local midnight).
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d.Abs()), nil
	}
	if n := len(s); n > 1 && (s[n-1] == 'd' || s[n-1] == 'w') {
		if k, err := strconv.Atoi(s[:n-1]); err == nil && k >= 0 {
			days := k
			if s[n-1] == 'w' {
				days *= 7
			}
			return now.AddDate(0, 0, -days), nil
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.Local); err == nil {
		return t, nil
	}
	return time.Time{}, usageErrorf("--since %q is neither a duration (36h, 90m, 7d, 2w), a date (2026-11-01) nor an RFC3339 time (2026-11-01T15:04:05Z)", s)
}

// table prints rows aligned by display width (tablewriter measures East
// Asian wide characters and emoji as two columns), borderless like
// kubectl's, without trailing blanks.
type table struct {
	w   io.Writer
	buf bytes.Buffer
	t   *tablewriter.Table
}

func newTable(w io.Writer, header ...string) *table {
	tb := &table{w: w}
	tb.t = tablewriter.NewTable(&tb.buf,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleNone),
			Settings: tw.Settings{
				Separators: tw.Separators{BetweenColumns: tw.Off, BetweenRows: tw.Off, ShowHeader: tw.Off, ShowFooter: tw.Off},
				Lines:      tw.Lines{ShowHeaderLine: tw.Off, ShowTop: tw.Off, ShowBottom: tw.Off, ShowFooterLine: tw.Off},
			},
		})),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAlignment(tw.AlignLeft),
		tablewriter.WithPadding(tw.Padding{Right: "  ", Overwrite: true}),
		tablewriter.WithHeaderAutoWrap(tw.WrapNone),
		tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithTrimSpace(tw.Off),
	)
	tb.t.Header(header)
	return tb
}

// row adds a row; its cells must already be safe (clip or safeLine).
func (tb *table) row(cells ...string) error { return tb.t.Append(cells) }

// flush renders the table. With no rows it prints the header alone.
func (tb *table) flush() error {
	if err := tb.t.Render(); err != nil {
		return fmt.Errorf("render table: %w", err)
	}
	for line := range strings.Lines(tb.buf.String()) {
		if _, err := io.WriteString(tb.w, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// safeLine neutralises every control character of a client's string,
// newlines and tabs included: for one-line places (cells, prompts, errors).
func safeLine(s string) string { return neutralise(s, false) }

// safeText neutralises the control characters of a client's multi-line
// text, keeping newlines and tabs (message bodies, summaries).
func safeText(s string) string { return neutralise(s, true) }

// neutralise writes each control character (C0, DEL, C1, the bidirectional
// overrides) and each invalid UTF-8 byte as a visible escape such as \x1b or
// \u202e, so that stored text cannot move the cursor, recolour or retitle
// the terminal, or reorder what the operator reads.
func neutralise(s string, keepLines bool) string {
	bad := func(r rune) bool {
		if keepLines && (r == '\n' || r == '\t') {
			return false
		}
		return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
	}
	if utf8.ValidString(s) && strings.IndexFunc(s, bad) < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case bad(r) && r < 0x100:
			fmt.Fprintf(&b, "\\x%02x", r)
		case bad(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
