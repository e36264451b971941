package main

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mattn/go-runewidth"
	"google.golang.org/protobuf/encoding/protojson"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// pretendTerminal makes sessionctl treat stdin and stderr as a terminal
// for the rest of the test.
func pretendTerminal(t *testing.T) {
	t.Helper()
	old := terminal
	terminal = func(any) bool { return true }
	t.Cleanup(func() { terminal = old })
}

// TestHelpListsFlags: `help CMD` and `CMD --help` show the same help, with
// the command's own flags and the global ones.
func TestHelpListsFlags(t *testing.T) {
	help := ctlIn(t, strings.NewReader(""), "help", "ls")
	flag := ctlIn(t, strings.NewReader(""), "ls", "--help")
	if help.code != 0 || flag.code != 0 || help.stdout != flag.stdout {
		t.Fatalf("help ls and ls --help differ:\n%v\n%v", help, flag)
	}
	for _, want := range []string{"usage: sessionctl ls [ALIAS_PREFIX]", "--label", "--since", "7d", "2026-11-01", "--prefix", "--limit",
		"Global flags:", "--addr", "--namespace", "--json", "--timeout", "10s"} {
		if !strings.Contains(help.stdout, want) {
			t.Errorf("help ls lacks %q:\n%s", want, help.stdout)
		}
	}
	r := ctlIn(t, strings.NewReader(""), "help", "rewind")
	if !strings.Contains(r.stdout, "--yes") {
		t.Errorf("help rewind lacks --yes:\n%s", r.stdout)
	}
	// The top-level help lists every command of the README's contract.
	r = ctlIn(t, strings.NewReader(""), "help")
	for _, c := range []string{"ls", "show", "rm", "rename", "fork", "rewind", "search", "export", "import", "purge", "watch", "health", "version", "fsck", "completion"} {
		if !regexp.MustCompile(`(?m)^  ` + c + `\s`).MatchString(r.stdout) {
			t.Errorf("help does not list %s:\n%s", c, r.stdout)
		}
	}
}

// TestCompletion: the shells' scripts, and session aliases completed from
// the running daemon, through the real bash script and binary.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := must(t, ctlIn(t, strings.NewReader(""), "completion", sh))
		if !strings.Contains(r.stdout, "sessionctl") || !strings.Contains(r.stdout, "__complete") {
			t.Errorf("completion %s:\n%.300s", sh, r.stdout)
		}
	}
	d := startDaemon(t, t.TempDir(), "")
	d.create(&sessiondv1.CreateSessionRequest{Alias: "proj-alpha", Title: "Alpha"})
	d.create(&sessiondv1.CreateSessionRequest{Alias: "proj-beta"})
	d.create(&sessiondv1.CreateSessionRequest{Alias: "other"})
	d.create(&sessiondv1.CreateSessionRequest{Namespace: "team", Alias: "proj-team"})

	r := must(t, d.ctl("__complete", "show", "proj-"))
	if !strings.Contains(r.stdout, "proj-alpha\tAlpha\n") || !strings.Contains(r.stdout, "proj-beta\n") || strings.Contains(r.stdout, "other") || strings.Contains(r.stdout, "proj-team") {
		t.Errorf("__complete show proj-:\n%s", r.stdout)
	}
	r = must(t, d.ctl("--namespace", "team", "__complete", "rm", "proj-alpha", ""))
	if !strings.Contains(r.stdout, "proj-team") || strings.Contains(r.stdout, "proj-alpha") {
		t.Errorf("__complete in namespace team:\n%s", r.stdout)
	}
	// rename completes its first argument only.
	if r := must(t, d.ctl("__complete", "rename", "proj-alpha", "")); strings.Contains(r.stdout, "proj-") {
		t.Errorf("__complete of rename's NEWALIAS offers sessions:\n%s", r.stdout)
	}

	// The bash script, sourced by a real bash, asking the real binary.
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	bin := filepath.Join(t.TempDir(), "sessionctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The script uses bash-completion's _get_comp_words_by_ref; without
	// that package, a stand-in that splits the line as bash did.
	script := `if [ -r /usr/share/bash-completion/bash_completion ]; then source /usr/share/bash-completion/bash_completion
else _get_comp_words_by_ref() { cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }; fi
source <("$BIN" completion bash)
COMP_WORDS=("$BIN" show proj-a); COMP_CWORD=2; COMP_LINE="$BIN show proj-a"; COMP_POINT=${#COMP_LINE}
__start_sessionctl
printf '%s\n' "${COMPREPLY[@]}"`
	cmd := exec.Command(bash, "--norc", "-c", script)
	cmd.Env = append(os.Environ(), "BIN="+bin, "SESSIOND_ADDR="+d.addr)
	var errb strings.Builder
	cmd.Stderr = &errb // compopt complains outside a real completion; harmless
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "proj-alpha" {
		t.Errorf("bash completion of 'show proj-a': %v\n%s\n%s", err, out, errb.String())
	}
}

// TestMan: the hidden man command writes a page per command from the same
// definitions.
func TestMan(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man1")
	must(t, ctlIn(t, strings.NewReader(""), "man", dir))
	page, err := os.ReadFile(filepath.Join(dir, "sessionctl-ls.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".TH \"SESSIONCTL\" \"1\"", "since", "timeout"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("sessionctl-ls.1 lacks %q:\n%s", want, page)
		}
	}
	for _, c := range []string{"sessionctl.1", "sessionctl-fsck.1", "sessionctl-watch.1"} {
		if _, err := os.Stat(filepath.Join(dir, c)); err != nil {
			t.Errorf("man page %s: %v", c, err)
		}
	}
	if r := ctlIn(t, strings.NewReader(""), "help"); strings.Contains(r.stdout, "  man ") {
		t.Errorf("the man command is listed in help; it is for packagers:\n%s", r.stdout)
	}
}

// TestTimeoutOnSilentPort: a port that accepts TCP but never speaks gRPC
// fails within --timeout, not after gRPC's 20 s handshake limit.
func TestTimeoutOnSilentPort(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		lis.Close()
		<-done
	})
	go func() {
		defer close(done)
		var conns []net.Conn // accepted, never answered
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	for _, args := range [][]string{{"ls"}, {"health"}, {"show", "x"}} {
		start := time.Now()
		r := ctlIn(t, strings.NewReader(""), append([]string{"--addr", lis.Addr().String(), "--timeout", "300ms"}, args...)...)
		took := time.Since(start)
		if r.code != exitError || !strings.Contains(r.stderr, "--timeout") {
			t.Errorf("%v on a silent port: want exit 1 naming --timeout, got %v", args, r)
		}
		checkOneLineError(t, r)
		if took > 10*time.Second {
			t.Errorf("%v on a silent port took %v with --timeout 300ms", args, took)
		}
	}
	r := ctlIn(t, strings.NewReader(""), "--addr", lis.Addr().String(), "--timeout", "300ms", "--json", "ls")
	if e := jsonError(t, r); e.Code != "DEADLINE_EXCEEDED" || e.ExitCode != exitError {
		t.Errorf("--json error on a silent port: %+v", e)
	}
}

type jsonErr struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	ExitCode int    `json:"exit_code"`
}

// jsonError checks that stderr is exactly one JSON error object agreeing
// with the exit code, and returns it.
func jsonError(t *testing.T, r result) jsonErr {
	t.Helper()
	var e jsonErr
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one JSON line on stderr, got %v", r)
	}
	dec := json.NewDecoder(strings.NewReader(lines[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Message == "" || e.ExitCode != r.code {
		t.Fatalf("stderr is not a JSON error for exit %d (%v): %v", r.code, err, r)
	}
	return e
}

func TestJSONErrors(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	tests := []struct {
		name string
		args []string
		code string
		exit int
	}{
		{"not found", []string{"--addr", d.addr, "--json", "show", "nosuch"}, "NOT_FOUND", exitNotFound},
		{"json after the command", []string{"--addr", d.addr, "show", "nosuch", "--json"}, "NOT_FOUND", exitNotFound},
		{"bad flag", []string{"--json", "ls", "--bogus"}, "INVALID_ARGUMENT", exitUsage},
		{"unknown command", []string{"--json", "frobnicate"}, "INVALID_ARGUMENT", exitUsage},
		{"rm without --yes", []string{"--addr", d.addr, "--json", "rm", "x"}, "INVALID_ARGUMENT", exitUsage},
		{"unreachable", []string{"--addr", deadAddr, "--json", "ls"}, "UNAVAILABLE", exitError},
		{"refused", []string{"--addr", d.addr, "--json", "fork", "--messages", "9", d.create(&sessiondv1.CreateSessionRequest{}).GetId()}, "INVALID_ARGUMENT", exitError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ctlIn(t, strings.NewReader(""), tt.args...)
			if r.code != tt.exit || r.stdout != "" {
				t.Fatalf("want exit %d and nothing on stdout, got %v", tt.exit, r)
			}
			if e := jsonError(t, r); e.Code != tt.code {
				t.Errorf("code %q, want %q (%+v)", e.Code, tt.code, e)
			}
		})
	}
}

// TestJSONOutputs: commands that printed nothing or an English sentence in
// JSON mode print JSON.
func TestJSONOutputs(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "gone", Title: "to delete"})
	r := must(t, d.ctl("--json", "rm", "--yes", "gone"))
	got := &sessiondv1.Session{}
	if err := protojson.Unmarshal([]byte(r.stdout), got); err != nil || got.GetId() != s.GetId() || r.stderr != "" {
		t.Errorf("rm --json --yes: %v %v", err, r)
	}
	d.create(&sessiondv1.CreateSessionRequest{Alias: "kept"})
	file := filepath.Join(t.TempDir(), "x.jsonl")
	r = must(t, d.ctl("--json", "export", "--all", "-o", file))
	var sum struct {
		Exported int    `json:"exported"`
		Output   string `json:"output"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || sum.Exported != 1 || sum.Output != file || r.stderr != "" {
		t.Errorf("export --json -o: %v %v", err, r)
	}
	r = must(t, d.ctl("--json", "rewind", "--yes", "kept", "0"))
	if err := protojson.Unmarshal([]byte(r.stdout), got); err != nil || got.GetAlias() != "kept" {
		t.Errorf("rewind --json: %v %v", err, r)
	}
}

// TestLsWideTitlesAndZones: CJK and emoji titles do not push the columns
// after them, and times carry their zone.
func TestLsWideTitlesAndZones(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	for _, title := range []string{"plain title", "会话标题 日本語", "🎉 party 🎉🎉", "한국어"} {
		d.create(&sessiondv1.CreateSessionRequest{Title: title, Labels: map[string]string{"k": "v"}})
	}
	r := must(t, d.ctl("ls"))
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("ls: want a header and 4 rows:\n%s", r.stdout)
	}
	col := -1
	for _, l := range lines {
		i := strings.LastIndex(l, "LABELS")
		if i < 0 {
			i = strings.LastIndex(l, "k=v")
		}
		w := runewidth.StringWidth(l[:i])
		if col >= 0 && w != col {
			t.Errorf("LABELS column at display column %d, not %d:\n%s", w, col, r.stdout)
		}
		col = w
	}
	zone := time.Now().Format("MST")
	if !strings.Contains(lines[1], " "+zone) {
		t.Errorf("ls times lack the zone %s:\n%s", zone, r.stdout)
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
	}{
		{"36h", now.Add(-36 * time.Hour)},
		{"90m", now.Add(-90 * time.Minute)},
		{"7d", now.AddDate(0, 0, -7)},
		{"2w", now.AddDate(0, 0, -14)},
		{"2026-11-01", time.Date(2026, 11, 1, 0, 0, 0, 0, time.Local)},
		{"2026-11-01T15:04:05Z", time.Date(2026, 11, 1, 15, 4, 5, 0, time.UTC)},
	}
	for _, tt := range tests {
		got, err := parseSince(tt.in, now)
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"yesterday", "7x", "d", "-3d", "2026-13-01"} {
		if _, err := parseSince(bad, now); exitCode(err) != exitUsage {
			t.Errorf("parseSince(%q): want a usage error, got %v", bad, err)
		}
	}
}

// TestControlCharactersNeutralised: what a client stored never reaches the
// operator's terminal as raw control characters.
func TestControlCharactersNeutralised(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	evil := "\x1b]0;owned\x07\x1b[2J\x1b[31mred\u202eevil\r"
	s := d.create(&sessiondv1.CreateSessionRequest{Alias: "evil", Title: "title " + evil, Summary: evil,
		Labels: map[string]string{"k": evil}, Metadata: map[string]string{"m": evil},
		Messages: []*sessiondv1.Message{
			// An assistant message: only those make tool calls a tool result answers.
			{Id: "1", Role: assistant, Content: "line one\nline " + evil, Name: "n" + evil,
				ToolCalls: []*sessiondv1.ToolCall{{Id: "c1", Name: "t" + evil, Arguments: `{"a":"` + evil + `"}`}}},
			{Id: "2", Role: toolRole, ToolCallId: "c1", Content: evil,
				Parts: []*sessiondv1.ContentPart{{Kind: &sessiondv1.ContentPart_Text{Text: evil}}}},
		}})
	w := runAsync(t, "--addr", d.addr, "watch", "evil")
	waitFor(t, "the watching line", func() bool { return strings.Contains(w.out.String(), "watching") })
	ref := &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Id{Id: s.GetId()}}
	if _, err := d.client.AppendMessages(t.Context(), &sessiondv1.AppendMessagesRequest{Ref: ref, Messages: []*sessiondv1.Message{
		{Id: "3", Role: assistant, Content: "live " + evil},
	}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the appended message", func() bool { return strings.Contains(w.out.String(), "live ") })

	outputs := map[string]string{"watch": w.out.String()}
	for _, args := range [][]string{{"ls"}, {"show", "evil"}, {"search", "red"}, {"export", "evil", "--format", "markdown"}} {
		outputs[strings.Join(args, " ")] = must(t, d.ctl(args...)).stdout
	}
	r := d.ctl("rename", "evil", "bad\x1balias")
	outputs["error"] = r.stderr
	for name, out := range outputs {
		if i := strings.IndexFunc(out, func(r rune) bool { return r == 0x1b || r == 0x07 || r == '\r' || r == 0x202e }); i >= 0 {
			t.Errorf("%s printed a raw control character at %d: %q", name, i, out)
		}
		if !strings.Contains(out, `\x1b`) {
			t.Errorf("%s does not show the escape as \\x1b: %q", name, out)
		}
	}
	if !strings.Contains(outputs["show evil"], "line one\n") {
		t.Errorf("show lost the message's newline:\n%s", outputs["show evil"])
	}
}

// TestRewindAsks: rewind asks like rm; --yes skips the question.
func TestRewindAsks(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	d.create(&sessiondv1.CreateSessionRequest{Alias: "r", Title: "Rewind me", Messages: []*sessiondv1.Message{
		text(user, "1", "one"), text(assistant, "2", "two"), text(user, "3", "three"),
	}})
	count := func() int64 {
		s, err := d.load("", mustID(t, d, "r"))
		if err != nil {
			t.Fatal(err)
		}
		return s.GetMessageCount()
	}
	// No terminal, no --yes: refused before any change.
	r := d.ctl("rewind", "r", "1")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--yes") || count() != 3 {
		t.Fatalf("rewind without --yes on a non-terminal: %v", r)
	}
	pretendTerminal(t)
	r = ctlIn(t, strings.NewReader("n\n"), "--addr", d.addr, "rewind", "r", "1")
	if r.code != 0 || !strings.Contains(r.stderr, `Rewind session`) || !strings.Contains(r.stderr, "dropping 2?") ||
		!strings.Contains(r.stderr, "Rewind me") || !strings.Contains(r.stderr, "kept r") || count() != 3 {
		t.Fatalf("rewind answered no: %v (count %d)", r, count())
	}
	r = ctlIn(t, strings.NewReader("y\n"), "--addr", d.addr, "rewind", "r", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "now has 1 messages") || count() != 1 {
		t.Fatalf("rewind answered yes: %v", r)
	}
	// rm asks the same way.
	r = ctlIn(t, strings.NewReader("no\n"), "--addr", d.addr, "rm", "r")
	if r.code != 0 || !strings.Contains(r.stderr, "Delete session") || count() != 1 {
		t.Fatalf("rm answered no: %v", r)
	}
	must(t, d.ctl("rewind", "--yes", "r", "0"))
	if count() != 0 {
		t.Errorf("rewind --yes did not rewind")
	}
}

func mustID(t *testing.T, d *daemon, alias string) string {
	t.Helper()
	resp, err := d.client.GetSession(t.Context(), &sessiondv1.GetSessionRequest{Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Alias{Alias: alias}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetSession().GetId()
}

// TestImportProgressCountsSessions: the counter on a terminal counts
// sessions, not bytes.
func TestImportProgressCountsSessions(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "")
	for range 3 {
		d.create(&sessiondv1.CreateSessionRequest{Namespace: "src", Messages: []*sessiondv1.Message{text(user, "1", "x")}})
	}
	file := filepath.Join(t.TempDir(), "x.jsonl")
	must(t, d.ctl("--namespace", "src", "export", "--all", "-o", file))
	pretendTerminal(t)
	r := must(t, d.ctl("--namespace", "dst", "import", file))
	if !strings.Contains(r.stderr, "imported 3 sessions") || strings.Contains(r.stderr, "bytes") {
		t.Errorf("import progress: %q", r.stderr)
	}
}
