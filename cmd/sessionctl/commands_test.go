package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
)

// A dead address: nothing listens on port 1 of loopback.
const deadAddr = "127.0.0.1:1"

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"no command", nil},
		{"unknown command", []string{"frobnicate"}},
		{"unknown global flag", []string{"--bogus", "ls"}},
		{"bad namespace", []string{"--namespace", "a/b", "ls"}},
		{"unknown command flag", []string{"ls", "--bogus"}},
		{"ls bad since", []string{"ls", "--since", "yesterday"}},
		{"ls bad label", []string{"ls", "--label", "novalue"}},
		{"ls two prefixes", []string{"ls", "a", "b"}},
		{"show no arg", []string{"show"}},
		{"show bad alias", []string{"show", "not/an alias"}},
		{"show two args", []string{"show", "a", "b"}},
		{"show negative tail", []string{"show", "a", "--tail", "-1"}},
		{"show bad view", []string{"show", "a", "--view", "summary"}},
		{"export jsonl context view", []string{"export", "a", "--view", "context"}},
		{"rm no arg", []string{"rm", "--yes"}},
		{"rename missing alias", []string{"rename", "a"}},
		{"rename uuid-shaped alias", []string{"rename", "a", uuid.NewString()}},
		{"fork bad messages", []string{"fork", "a", "--messages", "x"}},
		{"fork bad alias", []string{"fork", "a", "--alias", "b c"}},
		{"rewind no count", []string{"rewind", "a"}},
		{"rewind bad count", []string{"rewind", "a", "-3"}},
		{"search no query", []string{"search"}},
		{"search empty query", []string{"search", ""}},
		{"export neither", []string{"export"}},
		{"export both", []string{"export", "a", "--all"}},
		{"export bad format", []string{"export", "a", "--format", "xml"}},
		{"import no file", []string{"import"}},
		{"watch no arg", []string{"watch"}},
		{"health extra arg", []string{"health", "x"}},
		{"version extra arg", []string{"version", "x"}},
		{"fsck no dir", []string{"fsck"}},
		{"help unknown", []string{"help", "frobnicate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A dead address: usage errors must be found before dialing.
			r := ctlIn(t, strings.NewReader(""), append([]string{"--addr", deadAddr}, tt.args...)...)
			if r.code != exitUsage {
				t.Fatalf("want exit %d, got %v", exitUsage, r)
			}
			checkOneLineError(t, r)
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"help", "fork"}, {"fork", "--help"}, {"ls", "-h"}} {
		r := ctlIn(t, strings.NewReader(""), args...)
		if r.code != 0 || !strings.Contains(r.stdout, "usage: sessionctl") {
			t.Errorf("%v: want usage on stdout and exit 0, got %v", args, r)
		}
	}
	r := ctlIn(t, strings.NewReader(""), "help", "fork")
	for _, flag := range []string{"-messages", "-alias", "-title"} {
		if !strings.Contains(r.stdout, flag) {
			t.Errorf("help fork does not mention %s:\n%s", flag, r.stdout)
		}
	}
}

func TestUnreachableDaemon(t *testing.T) {
	for _, args := range [][]string{{"ls"}, {"show", "x"}, {"health"}, {"version"}} {
		r := ctlIn(t, strings.NewReader(""), append([]string{"--addr", deadAddr}, args...)...)
		if r.code != exitError {
			t.Errorf("%v: want exit 1, got %v", args, r)
		}
		checkOneLineError(t, r)
		if !strings.Contains(r.stderr, "cannot reach sessiond at "+deadAddr) || !strings.Contains(r.stderr, "SESSIOND_ADDR") {
			t.Errorf("%v: error does not say what to do: %q", args, r.stderr)
		}
	}
}

func TestNotFound(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	// A session in another namespace must not be found from the default one.
	other := d.create(&sessiondv1.CreateSessionRequest{Namespace: "other", Alias: "elsewhere"})
	missing := uuid.NewString()
	for _, target := range []string{"nosuch", missing, other.GetId(), "elsewhere"} {
		for _, args := range [][]string{
			{"show", target},
			{"rm", "--yes", target},
			{"rename", target, "newname"},
			{"fork", target},
			{"rewind", "--yes", target, "0"},
			{"export", target},
			{"watch", target},
		} {
			r := d.ctl(args...)
			if r.code != exitNotFound {
				t.Errorf("%v: want exit %d, got %v", args, exitNotFound, r)
				continue
			}
			checkOneLineError(t, r)
		}
	}
	// The other namespace still has it.
	must(t, d.ctl("--namespace", "other", "show", "elsewhere"))
}

func TestRm(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "doomed", Messages: []*sessiondv1.Message{text(user, "m1", "hi")}})

	// Without a terminal on stdin and without --yes: refuse, exit 2, keep it.
	r := ctlIn(t, strings.NewReader("y\n"), "--addr", d.addr, "rm", "doomed")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("rm without --yes on a non-terminal: want exit 2 naming --yes, got %v", r)
	}
	checkOneLineError(t, r)
	must(t, d.ctl("show", "doomed"))

	must(t, d.ctl("rm", "--yes", "doomed"))
	if r := d.ctl("show", s.GetId()); r.code != exitNotFound {
		t.Fatalf("show after rm: want exit 3, got %v", r)
	}

	// By id, several at once.
	a := d.create(&sessiondv1.CreateSessionRequest{})
	b := d.create(&sessiondv1.CreateSessionRequest{Alias: "bee"})
	must(t, d.ctl("rm", a.GetId(), "bee", "-y"))
	for _, id := range []string{a.GetId(), b.GetId()} {
		if _, err := d.client.GetSession(t.Context(), &sessiondv1.GetSessionRequest{Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: id}}}); status.Code(err) != codes.NotFound {
			t.Errorf("session %s after rm: want NOT_FOUND, got %v", id, err)
		}
	}
}

func TestLs(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	a := d.create(&sessiondv1.CreateSessionRequest{Alias: "proj-a", Title: "Alpha", Labels: map[string]string{"team": "x", "env": "dev"}})
	b := d.create(&sessiondv1.CreateSessionRequest{Alias: "proj-b", Title: "Beta", Labels: map[string]string{"team": "y"}})
	c := d.create(&sessiondv1.CreateSessionRequest{Title: "no alias", Messages: []*sessiondv1.Message{text(user, "1", "x"), text(assistant, "2", "y")}})
	d.create(&sessiondv1.CreateSessionRequest{Namespace: "other", Alias: "proj-z"})

	// ids of ls --json, in order.
	lsIDs := func(args ...string) []string {
		t.Helper()
		r := must(t, d.ctl(append([]string{"--json", "ls"}, args...)...))
		var ids []string
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if line == "" {
				continue
			}
			s := &sessiondv1.Session{}
			if err := protojson.Unmarshal([]byte(line), s); err != nil {
				t.Fatalf("ls --json line %q: %v", line, err)
			}
			ids = append(ids, s.GetId())
		}
		return ids
	}
	newestFirst := []string{c.GetId(), b.GetId(), a.GetId()}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"all", nil, newestFirst},
		{"alias prefix", []string{"proj-"}, []string{b.GetId(), a.GetId()}},
		{"prefix flag", []string{"--prefix", "proj-a"}, []string{a.GetId()}},
		{"label", []string{"--label", "team=x"}, []string{a.GetId()}},
		{"two labels", []string{"--label", "team=x", "--label", "env=dev"}, []string{a.GetId()}},
		{"labels mismatch", []string{"--label", "team=x", "--label", "env=prod"}, nil},
		{"since duration", []string{"--since", "1h"}, newestFirst},
		{"since past time", []string{"--since", past}, newestFirst},
		{"since future time", []string{"--since", future}, nil},
		{"limit", []string{"--limit", "1"}, newestFirst[:1]},
		{"json after command", []string{"--json"}, newestFirst},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, lsIDs(tt.args...)); diff != "" {
				t.Errorf("ls %v ids (-want +got):\n%s", tt.args, diff)
			}
		})
	}

	// The table: a header, then one row per session with alias, count, title.
	r := must(t, d.ctl("ls"))
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("ls table: want header + 3 rows, got:\n%s", r.stdout)
	}
	if !regexp.MustCompile(c.GetId() + `\s+-\s+2\s+.*no alias`).MatchString(lines[1]) {
		t.Errorf("ls row for the alias-less session: %q", lines[1])
	}
	if !regexp.MustCompile(a.GetId() + `\s+proj-a\s+0\s+.*Alpha\s+env=dev,team=x`).MatchString(lines[3]) {
		t.Errorf("ls row for proj-a: %q", lines[3])
	}
	// The namespace flag selects the namespace.
	r = must(t, d.ctl("--namespace", "other", "ls"))
	if !strings.Contains(r.stdout, "proj-z") || strings.Contains(r.stdout, "proj-a") {
		t.Errorf("ls in namespace other:\n%s", r.stdout)
	}
}

func TestShow(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	msgs := []*sessiondv1.Message{
		text(system, "s", "be brief"),
		text(user, "u1", "what's the weather in Paris?"),
		{Id: "a1", Role: assistant, Content: "let me check",
			ToolCalls: []*sessiondv1.ToolCall{{Id: "call-1", Name: "weather", Arguments: `{"city":"Paris"}`}},
			CreatedAt: timestamppb.New(time.Date(2025, 3, 1, 12, 0, 1, 0, time.UTC))},
		{Id: "t1", Role: toolRole, ToolCallId: "call-1", Content: "18C and sunny",
			CreatedAt: timestamppb.New(time.Date(2025, 3, 1, 12, 0, 2, 0, time.UTC))},
		text(assistant, "a2", "It is 18C and sunny in Paris."),
	}
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "weather", Title: "Weather chat", Labels: map[string]string{"k": "v"}, Messages: msgs})

	r := must(t, d.ctl("show", "weather"))
	out := r.stdout
	for _, want := range []string{"id:", s.GetId(), "alias:", "weather", "title:", "Weather chat", "messages:", "5", "labels:", "k=v",
		"[0]", "system", "be brief", "[1]", "user", "what's the weather in Paris?",
		"[2]", "assistant", "let me check", "It is 18C and sunny in Paris.",
		fmtTime(msgs[1].GetCreatedAt())} {
		if !strings.Contains(out, want) {
			t.Errorf("show output lacks %q:\n%s", want, out)
		}
	}
	// The tool call's result sits right beside the call, not as a later turn.
	call := strings.Index(out, "tool call weather [call-1] {\"city\":\"Paris\"}")
	result := strings.Index(out, "18C and sunny\n")
	next := strings.Index(out, "[4]")
	if call < 0 || result < call || next < result {
		t.Errorf("tool call, its result and the next turn are out of order (%d, %d, %d):\n%s", call, result, next, out)
	}
	if !strings.Contains(out, "← result [3] "+fmtTime(msgs[3].GetCreatedAt())) || strings.Count(out, "[3]") != 1 {
		t.Errorf("the tool result is not shown once, beside its call, with its index:\n%s", out)
	}
	// By id as well; the same output.
	if r2 := must(t, d.ctl("show", strings.ToUpper(s.GetId()))); r2.stdout != out {
		t.Errorf("show by (upper-case) id differs from show by alias:\n%s", r2.stdout)
	}

	// --tail: the last two messages, with their real indexes.
	r = must(t, d.ctl("show", "weather", "--tail", "2"))
	if !strings.Contains(r.stdout, "3 earlier messages not shown") || !strings.Contains(r.stdout, "[3]") || !strings.Contains(r.stdout, "[4]") || strings.Contains(r.stdout, "[2]") {
		t.Errorf("show --tail 2:\n%s", r.stdout)
	}

	// --json: the session with its messages, as stored.
	r = must(t, d.ctl("show", "--json", "weather"))
	got := &sessiondv1.Session{}
	if err := protojson.Unmarshal([]byte(r.stdout), got); err != nil {
		t.Fatalf("show --json: %v\n%s", err, r.stdout)
	}
	want, err := d.load("", s.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("show --json (-stored +shown):\n%s", diff)
	}
	if n := strings.Count(r.stdout, "\n"); n != 1 {
		t.Errorf("show --json wrote %d lines, want 1", n)
	}
}

func TestRenameForkRewind(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	msgs := []*sessiondv1.Message{text(user, "1", "one"), text(assistant, "2", "two"), text(user, "3", "three")}
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "orig", Title: "Original", Summary: "sum", Labels: map[string]string{"l": "1"}, Messages: msgs})
	d.create(&sessiondv1.CreateSessionRequest{Alias: "taken"})

	must(t, d.ctl("rename", "orig", "renamed"))
	if r := d.ctl("show", "orig"); r.code != exitNotFound {
		t.Errorf("old alias after rename: want exit 3, got %v", r)
	}
	r := must(t, d.ctl("show", "renamed"))
	if !strings.Contains(r.stdout, s.GetId()) {
		t.Errorf("new alias does not name the session:\n%s", r.stdout)
	}
	if r := d.ctl("rename", "renamed", "taken"); r.code != exitError || !strings.Contains(r.stderr, "taken") {
		t.Errorf("rename to a taken alias: want exit 1 naming it, got %v", r)
	}

	// fork with all options, flags after the argument.
	r = must(t, d.ctl("fork", "renamed", "--messages", "2", "--alias", "forked", "--title", "Forked"))
	forkID := strings.TrimSpace(r.stdout)
	f, err := d.load("", forkID)
	if err != nil {
		t.Fatalf("fork printed %q, not a loadable id: %v", r.stdout, err)
	}
	if f.GetAlias() != "forked" || f.GetTitle() != "Forked" || f.GetSummary() != "sum" || f.GetLabels()["l"] != "1" ||
		f.GetParent().GetSessionId() != s.GetId() || f.GetParent().GetMessageCount() != 2 {
		t.Errorf("fork: %v", f)
	}
	if diff := cmp.Diff(msgs[:2], f.GetMessages(), protocmp.Transform()); diff != "" {
		t.Errorf("fork messages (-want +got):\n%s", diff)
	}
	// --json prints the new session; a fork of everything by default.
	r = must(t, d.ctl("--json", "fork", s.GetId()))
	f2 := &sessiondv1.Session{}
	if err := protojson.Unmarshal([]byte(r.stdout), f2); err != nil || f2.GetMessageCount() != 3 || f2.GetTitle() != "Original" {
		t.Errorf("fork --json: %v %v", err, r.stdout)
	}
	if r := d.ctl("fork", "renamed", "--messages", "9"); r.code != exitError {
		t.Errorf("fork beyond the session: want exit 1, got %v", r)
	}

	r = must(t, d.ctl("rewind", "renamed", "1", "--yes"))
	if !strings.Contains(r.stdout, "now has 1 messages") {
		t.Errorf("rewind output: %q", r.stdout)
	}
	got, err := d.load("", s.GetId())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(msgs[:1], got.GetMessages(), protocmp.Transform()); diff != "" {
		t.Errorf("after rewind (-want +got):\n%s", diff)
	}
	if r := d.ctl("rewind", "-y", "renamed", "5"); r.code != exitError {
		t.Errorf("rewind beyond the session: want exit 1, got %v", r)
	}

	// An empty NEWALIAS removes the alias.
	must(t, d.ctl("rename", "renamed", ""))
	if got, err := d.load("", s.GetId()); err != nil || got.GetAlias() != "" {
		t.Errorf("after rename to \"\": alias %q, err %v", got.GetAlias(), err)
	}
}

func TestSearch(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	a := d.create(&sessiondv1.CreateSessionRequest{Alias: "zeta", Messages: []*sessiondv1.Message{
		text(user, "1", "nothing here"), text(assistant, "2", "the Needle is in this haystack"),
	}})
	b := d.create(&sessiondv1.CreateSessionRequest{Title: "needle title"})
	d.create(&sessiondv1.CreateSessionRequest{Title: "unrelated"})

	r := must(t, d.ctl("search", "needle"))
	if !regexp.MustCompile(`zeta\s+1\s+.*Needle is in this haystack`).MatchString(r.stdout) {
		t.Errorf("search table lacks the message hit:\n%s", r.stdout)
	}
	if !regexp.MustCompile(b.GetId() + `\s+-\s+.*needle title`).MatchString(r.stdout) {
		t.Errorf("search table lacks the title hit:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "unrelated") {
		t.Errorf("search shows a session without the text:\n%s", r.stdout)
	}

	r = must(t, d.ctl("--json", "search", "haystack"))
	hit := &sessiondv1.SearchSessionsResponse{}
	if err := protojson.Unmarshal([]byte(strings.TrimSpace(r.stdout)), hit); err != nil {
		t.Fatalf("search --json %q: %v", r.stdout, err)
	}
	if hit.GetSession().GetId() != a.GetId() || hit.GetMessageIndex() != 1 || !strings.Contains(hit.GetSnippet(), "haystack") {
		t.Errorf("search --json hit: %v", hit)
	}
	if r := must(t, d.ctl("search", "absent-text")); strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("search without hits should print the header only:\n%s", r.stdout)
	}
}

func TestHealthVersion(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	r := must(t, d.ctl("health"))
	if strings.TrimSpace(r.stdout) != "SERVING" {
		t.Errorf("health: %q", r.stdout)
	}
	// An unknown service is a failure (1), not a missing session (3).
	r = d.ctl("health", "--service", "no.such.Service")
	if r.code != exitError || strings.Contains(r.stderr, "no such session") || !strings.Contains(r.stderr, "no.such.Service") {
		t.Errorf("health of an unknown service: %v", r)
	}
	r = must(t, d.ctl("version"))
	if !regexp.MustCompile(`(?m)^sessionctl \S+\nsessiond \S+ \(backend file\)$`).MatchString(r.stdout) {
		t.Errorf("version:\n%s", r.stdout)
	}
	r = must(t, d.ctl("--json", "version"))
	if !regexp.MustCompile(`^\{"backend":"file","sessionctl":"[^"]+","sessiond":"[^"]+"\}\n$`).MatchString(r.stdout) {
		t.Errorf("version --json: %q", r.stdout)
	}
}

func TestAddrFromEnvAndUnixSocket(t *testing.T) {
	// A short socket path: sun_path holds ~108 bytes.
	dir, err := mkShortTemp(t)
	if err != nil {
		t.Fatal(err)
	}
	sock := "unix:" + dir + "/s.sock"
	d := startDaemon(t, t.TempDir(), sock)
	d.create(&sessiondv1.CreateSessionRequest{Namespace: "team", Alias: "over-unix"})
	t.Setenv("SESSIOND_ADDR", sock)
	t.Setenv("SESSIOND_NAMESPACE", "team")
	r := must(t, ctlIn(t, strings.NewReader(""), "ls"))
	if !strings.Contains(r.stdout, "over-unix") {
		t.Errorf("ls over %s in namespace team from the environment:\n%s", sock, r.stdout)
	}
	// Flags win over the environment.
	r = must(t, ctlIn(t, strings.NewReader(""), "--namespace", "", "ls"))
	if strings.Contains(r.stdout, "over-unix") {
		t.Errorf("--namespace \"\" did not override SESSIOND_NAMESPACE:\n%s", r.stdout)
	}
}

func TestLsShowUsageAndModels(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	msgs := []*sessiondv1.Message{
		text(user, "u1", "weather in Paris and Oslo?"),
		{Id: "a1", Role: assistant, Model: "gpt-4.1", Usage: &sessiondv1.Usage{InputTokens: 120, OutputTokens: 30, CachedInputTokens: 100},
			ToolCalls: []*sessiondv1.ToolCall{{Id: "call_paris", Name: "weather"}, {Id: "call_oslo", Name: "weather"}}},
		{Id: "t1", Role: toolRole, ToolCallId: "call_paris", Content: "18C"},
		{Id: "a2", Role: assistant, Model: "claude-sonnet-4", Content: "18C in Paris", Usage: &sessiondv1.Usage{InputTokens: 200, OutputTokens: 12, ReasoningTokens: 4}},
	}
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "tools", Messages: msgs, ExpireAfter: durationpb.New(30 * 24 * time.Hour)})
	plain := d.create(&sessiondv1.CreateSessionRequest{Alias: "plain"})

	r := must(t, d.ctl("ls"))
	if !regexp.MustCompile(s.GetId() + `\s+tools\s+4\s+320/42\s+claude-sonnet-4 \+1\s`).MatchString(r.stdout) {
		t.Errorf("ls row of the session with usage:\n%s", r.stdout)
	}
	if !regexp.MustCompile(plain.GetId() + `\s+plain\s+0\s+-\s+-\s`).MatchString(r.stdout) {
		t.Errorf("ls row of the session without usage:\n%s", r.stdout)
	}
	r = must(t, d.ctl("ls", "--model", "gpt-4.1"))
	if !strings.Contains(r.stdout, s.GetId()) || strings.Contains(r.stdout, plain.GetId()) {
		t.Errorf("ls --model gpt-4.1:\n%s", r.stdout)
	}
	r = must(t, d.ctl("show", "tools"))
	for _, want := range []string{
		"usage:     320 in (100 cached), 42 out (4 reasoning)",
		"models:    claude-sonnet-4, gpt-4.1",
		"open call: call_oslo",
		"expires:   after 30d without an update",
		"assistant [gpt-4.1; 120 in (100 cached), 30 out]",
		"assistant [claude-sonnet-4; 200 in, 12 out (4 reasoning)]",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestFlagErrorsNameRealCommands: a bad flag is reported once, prefixed
// once, with a help command that exists.
func TestFlagErrorsNameRealCommands(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--bogus"}, "sessionctl: unknown flag: --bogus; see 'sessionctl help'\n"},
		{[]string{"ls", "--bogus"}, "sessionctl: ls: unknown flag: --bogus; see 'sessionctl help ls'\n"},
		{[]string{"token", "add", "--bogus"}, "sessionctl: token add: unknown flag: --bogus; see 'sessionctl help token add'\n"},
	} {
		r := ctlIn(t, strings.NewReader(""), tt.args...)
		if r.code != exitUsage || r.stderr != tt.want {
			t.Errorf("%v: got %v; want exit 2 and %q", tt.args, r, tt.want)
		}
		hint := regexp.MustCompile(`'sessionctl (help[^']*)'`).FindStringSubmatch(r.stderr)
		if hint == nil {
			continue
		}
		if h := ctlIn(t, strings.NewReader(""), strings.Fields(hint[1])...); h.code != 0 {
			t.Errorf("the hint %q does not run: %v", hint[0], h)
		}
	}
}

// TestVersionFlag: --version prints the stamped version without a daemon.
func TestVersionFlag(t *testing.T) {
	old := version
	version = "v9.8.7-test"
	t.Cleanup(func() { version = old })
	r := ctlIn(t, strings.NewReader(""), "--addr", deadAddr, "--version")
	if r.code != 0 || r.stdout != "sessionctl v9.8.7-test\n" || r.stderr != "" {
		t.Fatalf("--version: %v", r)
	}
}

// TestSnippetWholeWords: search's SNIPPET column shows whole words of the
// snippet the daemon cut (storage.Snippet) around the query.
func TestSnippetWholeWords(t *testing.T) {
	words := strings.Fields("the quick brown foxes jumped over seventeen lazy dogs while the farmer slept soundly in his comfortable chair near the window")
	text := strings.Join(words, " ") + " needle " + strings.Join(words, " ")
	snippet, ok := storage.Snippet(text, "needle")
	if !ok {
		t.Fatal("no snippet")
	}
	cell := snippetCell(snippet, "needle")
	if !strings.HasPrefix(cell, "…") || !strings.HasSuffix(cell, "…") || !strings.Contains(cell, " needle ") {
		t.Fatalf("cell %q of snippet %q", cell, snippet)
	}
	for _, w := range strings.Fields(strings.Trim(cell, "…")) {
		if !slices.Contains(words, w) && w != "needle" {
			t.Errorf("cell %q holds a cut word %q (snippet %q)", cell, w, snippet)
		}
	}
	// A short text is shown whole, and a long cell is cut between words.
	if got := snippetCell("a needle here", "needle"); got != "a needle here" {
		t.Errorf("short snippet shown as %q", got)
	}
	if got := clipWords(strings.Repeat("word ", 40), 22); got != "word word word word…" {
		t.Errorf("clipWords = %q", got)
	}
}
