package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

var (
	daemonBin, replBin string
	buildErr           error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "repl-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	daemonBin, buildErr = clienttest.BuildDaemon(dir)
	if buildErr == nil {
		replBin = filepath.Join(dir, "repl")
		if out, err := exec.Command("go", "build", "-o", replBin, "github.com/sessiond/sessiond/examples/repl").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build examples/repl: %w\n%s", err, out)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func needBinaries(t *testing.T) {
	t.Helper()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// runREPL runs the REPL in process with input as stdin, its state (spool,
// history) under the test's XDG_STATE_HOME.
func runREPL(t *testing.T, args []string, input string) (stdout, stderr string) {
	t.Helper()
	if os.Getenv("XDG_STATE_HOME") == "" {
		t.Setenv("XDG_STATE_HOME", t.TempDir())
	}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := run(ctx, args, strings.NewReader(input), &out, &errOut, nil); err != nil {
		t.Fatalf("run(%q): %v\nstdout:\n%s\nstderr:\n%s", args, err, out.String(), errOut.String())
	}
	return out.String(), errOut.String()
}

var resumeRE = regexp.MustCompile(`(?m)^resume with: (repl .*)$`)

// resumeArgs returns the arguments of the printed resume command.
func resumeArgs(t *testing.T, stdout string) []string {
	t.Helper()
	m := resumeRE.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no resume command in:\n%s", stdout)
	}
	return strings.Fields(m[1])[1:]
}

// loopbackServer starts an in-process sessiond on a loopback port.
func loopbackServer(t *testing.T) *clienttest.Server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := clienttest.Start(t.TempDir(), clienttest.WithListener(lis))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func stored(t *testing.T, addr string, r client.Ref) (*client.Session, []string) {
	t.Helper()
	c, err := client.Dial(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, msgs, err := c.Load(t.Context(), r, client.LoadOptions{})
	if err != nil {
		t.Fatalf("Load(%v): %v", r, err)
	}
	var out []string
	for _, m := range msgs {
		out = append(out, m.GetContent())
	}
	return s, out
}

// TestResumeAgainstDaemon: chat 3 turns with the real daemon, /quit, run the
// printed resume command, and find the 3 turns there.
func TestResumeAgainstDaemon(t *testing.T) {
	needBinaries(t)
	d := clienttest.StartDaemon(t, daemonBin, t.TempDir(), "127.0.0.1:0")
	out, _ := runREPL(t, []string{"--addr", d.Addr}, "hello\nhow are you\nbye\n/quit\n")
	args := resumeArgs(t, out)
	if want := []string{"--addr", d.Addr, "--session"}; !slices.Equal(args[:3], want) {
		t.Fatalf("resume command args %q, want %q then the id", args, want)
	}
	id := args[3]
	turns := []string{
		"you: hello", "assistant: echo: hello",
		"you: how are you", "assistant: echo: how are you",
		"you: bye", "assistant: echo: bye",
	}

	out2, _ := runREPL(t, args, "/quit\n")
	if !strings.Contains(out2, fmt.Sprintf("resumed session %s (6 messages)", id)) {
		t.Errorf("second run did not resume %s:\n%s", id, out2)
	}
	if !strings.Contains(out2, strings.Join(turns, "\n")+"\n") {
		t.Errorf("second run does not show the 3 turns:\n%s", out2)
	}
	_, msgs := stored(t, d.Addr, client.ID(id))
	if want := []string{"hello", "echo: hello", "how are you", "echo: how are you", "bye", "echo: bye"}; !slices.Equal(msgs, want) {
		t.Errorf("stored = %q, want %q", msgs, want)
	}
	d.Stop(t)
}

func TestCommands(t *testing.T) {
	srv := loopbackServer(t)
	c, err := client.Dial(t.Context(), srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	other, err := c.Create(t.Context(), client.CreateOptions{Alias: "other",
		Messages: []*sessiondv1.Message{{Role: sessiondv1.Role_ROLE_USER, Content: "from other"}}})
	if err != nil {
		t.Fatal(err)
	}

	script := strings.Join([]string{
		"first", "second", "/undo", "/save", "/sessions",
		"/fork", "third", "/reset", "/help", "/bogus", "/undo",
		"/load nosuch", "/load other", "/quit",
	}, "\n") + "\n"
	out, errOut := runREPL(t, []string{"--addr", srv.Addr(), "--autosave", "0"}, script)

	s1 := regexp.MustCompile(`new session (\S+);`).FindStringSubmatch(out)
	fork := regexp.MustCompile(`forked (\S+) into (\S+);`).FindStringSubmatch(out)
	if s1 == nil || fork == nil || fork[1] != s1[1] {
		t.Fatalf("no session or fork line:\n%s", out)
	}
	for _, want := range []string{
		"assistant: echo: first",
		"undid: second",
		"saved session " + s1[1] + " (revision",
		"ID  ", "other", s1[1] + "  ",
		"session " + fork[2] + " cleared",
		"/undo", // from /help
		"nothing to undo",
		fmt.Sprintf("resumed session %s (1 messages)\nyou: from other\n", other.ID),
		"resume with: repl --addr " + srv.Addr() + " --session other\n", // by alias
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{
		"unknown command /bogus",
		"error: session nosuch not found\n", // in words, not a gRPC error chain
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if _, got := stored(t, srv.Addr(), client.ID(s1[1])); !slices.Equal(got, []string{"first", "echo: first"}) {
		t.Errorf("first session stored %q", got)
	}
	fs, got := stored(t, srv.Addr(), client.ID(fork[2]))
	if len(got) != 0 || fs.Parent == nil || fs.Parent.SessionID != s1[1] {
		t.Errorf("fork stored %q, parent %+v", got, fs.Parent)
	}
}

// TestEOFNamespaceAlias: EOF saves; the resume command names the alias and
// keeps the namespace; --session with a new alias creates the session and
// the resume command resumes it.
func TestEOFNamespaceAlias(t *testing.T) {
	srv := loopbackServer(t)
	args := []string{"--addr", srv.Addr(), "--namespace", "team", "--session", "notes"}
	out, _ := runREPL(t, args, "remember this\n")
	ra := resumeArgs(t, out)
	if want := []string{"--addr", srv.Addr(), "--session", "notes", "--namespace", "team"}; !slices.Equal(ra, want) {
		t.Fatalf("resume args %q, want %q", ra, want)
	}
	id := regexp.MustCompile(`new session (\S+);`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("no new session line:\n%s", out)
	}
	out2, _ := runREPL(t, ra, "")
	if !strings.Contains(out2, "resumed session "+id[1]+" (2 messages)\nyou: remember this\n") {
		t.Errorf("resuming by alias:\n%s", out2)
	}
	s, got := stored(t, srv.Addr(), client.Alias("notes").In("team"))
	if s.ID != id[1] || !slices.Equal(got, []string{"remember this", "echo: remember this"}) {
		t.Errorf("stored %s %q", s.ID, got)
	}
}

func TestBadUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"--nope"}, strings.NewReader(""), &out, &errOut, nil); err == nil {
		t.Error("run with an unknown flag succeeded")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	free, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := free.Addr().String()
	_ = free.Close()
	if err := run(ctx, []string{"--addr", addr, "--no-spool"}, strings.NewReader(""), &out, &errOut, nil); err == nil ||
		!strings.Contains(err.Error(), "is sessiond running") {
		t.Errorf("run with no daemon = %v", err)
	}
}

// TestSIGINT runs the REPL binary, chats, interrupts it, and checks that the
// turn was saved and the resume command printed.
func TestSIGINT(t *testing.T) {
	needBinaries(t)
	srv := loopbackServer(t)
	p := startREPL(t, t.TempDir(), "--addr", srv.Addr())
	p.waitFor("new session ")
	p.send("interrupted turn")
	p.waitFor("assistant: echo: interrupted turn")
	p.signal(syscall.SIGINT)
	line := p.waitFor("resume with: ")
	if err := p.wait(); err != nil {
		t.Fatalf("repl exit after SIGINT: %v\n%s", err, p.transcript())
	}
	args := strings.Fields(strings.TrimPrefix(line, "resume with: "))
	_, got := stored(t, srv.Addr(), client.ID(args[len(args)-1]))
	if !slices.Equal(got, []string{"interrupted turn", "echo: interrupted turn"}) {
		t.Errorf("stored after SIGINT = %q", got)
	}
}
