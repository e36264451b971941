package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/testcerts"
)

// The tests in this file run the Python SDK (clients/python/sessiond_client)
// against the real daemon: its own unittest suite, which starts and restarts
// the daemon built for this run, and the exchange of spool files between the
// Python and the Go SDK, which share one format.

// pythonSDKTests are the tests of clients/python/tests, all of which must run
// and pass; a test that is renamed, removed, added without being named here,
// or skipped fails TestPythonSDK.
var pythonSDKTests = []string{
	"test_resume_by_alias_across_processes",
	"test_context_manager_saves_on_exit_and_ids_are_client_set",
	"test_append_refuses_what_the_daemon_would",
	"test_errors_are_typed",
	"test_autosave",
	"test_idle_save",
	"test_retry_after_restart_without_duplicate",
	"test_conflict_and_reload",
	"test_tool_call_left_open_is_closed_on_resume",
	"test_spool_replay_after_quitting_while_down",
	"test_spool_that_replaces_is_kept_aside",
	"test_lost_answer_then_another_writer",
	"test_update_retry_after_lost_answer",
	"test_damaged_spool_is_kept_aside",
	"test_later_appends_share_a_stream",
	"test_append_stream_falls_back_to_unary",
	"test_crc32c",
	"test_round_trip",
	"test_token_and_tls",
	"test_client_compact_and_load_views",
	"test_handle_compacts_at_its_revision",
	"test_handle_streams_a_turn_that_a_watcher_follows",
	"test_abandoned_turn_is_interrupted",
	"test_writer_interrupts_its_turn",
	"test_client_turn_checks",
}

// needPython skips (or, in CI, fails) the test when Debian's Python cannot
// import grpc, and returns the environment that finds the stubs and the SDK.
func needPython(t *testing.T) []string {
	t.Helper()
	var missing error
	if out, err := exec.Command(python, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		missing = fmt.Errorf("%s cannot import grpc: %v: %s", python, err, bytes.TrimSpace(out))
	}
	needTool(t, missing, "python3-grpcio and python3-protobuf (apt-get install python3-grpcio)")
	return []string{
		"PYTHONPATH=" + filepath.Join(moduleRoot, "gen", "python") + string(os.PathListSeparator) + filepath.Join(moduleRoot, "clients", "python"),
		"PYTHONDONTWRITEBYTECODE=1",
	}
}

// unittestRan matches the count line of `python -m unittest`.
var unittestRan = regexp.MustCompile(`(?m)^Ran (\d+) tests? in `)

func TestPythonSDK(t *testing.T) {
	env := append(needPython(t), "SESSIOND_BIN="+sessiondBin)
	// test_tls.py starts its daemon with tokens and mutual TLS: a token file
	// (a writer in namespace A), a server certificate for 127.0.0.1 and a
	// client certificate, each from its own CA.
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	serverCA, clientCA := testcerts.NewCA(t, dir, "pysdk-server"), testcerts.NewCA(t, dir, "pysdk-client")
	certFile, keyFile, _ := serverCA.Issue(t, dir, "server", false)
	clientCert, clientKey, _ := clientCA.Issue(t, dir, "client", true)
	tlsArgs, err := json.Marshal([]string{"--auth-tokens", toks.file, "--tls-cert", certFile, "--tls-key", keyFile,
		"--tls-client-ca", clientCA.PEMFile})
	if err != nil {
		t.Fatal(err)
	}
	env = append(env, "SESSIOND_TLS_ARGS="+string(tlsArgs), "SESSIOND_TLS_CA="+serverCA.PEMFile,
		"SESSIOND_TLS_CLIENT_CERT="+clientCert, "SESSIOND_TLS_CLIENT_KEY="+clientKey,
		"SESSIOND_TEST_TOKEN="+toks.writeA, "SESSIOND_TEST_NAMESPACE="+nsA)
	ctx := testContext(t, scriptTimeout)
	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "discover", "-v",
		"-s", "clients/python/tests", "-t", "clients/python")
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("python -m unittest (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("python -m unittest: %v", err)
	}
	// The summary is "OK" alone: "OK (skipped=1)" or a failure fails the
	// test, and every named test must have run.
	text := string(out)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if last := lines[len(lines)-1]; last != "OK" {
		t.Errorf("unittest summary %q, want OK (nothing skipped)", last)
	}
	for _, name := range pythonSDKTests {
		if !regexp.MustCompile(`(?m)^` + name + ` \([\w.]+\) \.\.\. `).MatchString(text) {
			t.Errorf("%s did not run", name)
		}
	}
	if m := unittestRan.FindStringSubmatch(text); m == nil || m[1] != fmt.Sprint(len(pythonSDKTests)) {
		t.Errorf("unittest ran %v tests, want the %d named in pythonSDKTests", m, len(pythonSDKTests))
	}
}

// spoolHelper runs clients/python/tests/sdk_helper.py with args.
func spoolHelper(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, python, append([]string{"clients/python/tests/sdk_helper.py"}, args...)...)
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// TestSpoolInterop proves that the two SDKs' spools are one format: turns
// that one SDK spooled when it quit while the daemon was down are sent by the
// other SDK's next open of the session.
func TestSpoolInterop(t *testing.T) {
	env := needPython(t)
	ctx := testContext(t, scriptTimeout)

	t.Run("Python spools, Go sends", func(t *testing.T) {
		d := startDaemon(t, t.TempDir())
		spool := t.TempDir()
		c := dialSDK(t, ctx, d.Addr)
		sess, err := c.Create(ctx, client.CreateOptions{Alias: "py-to-go"})
		if err != nil {
			t.Fatal(err)
		}
		cmd := spoolHelper(ctx, env, "quit-while-down", d.Addr, sess.ID, spool)
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() || lines.Text() != "ready" {
			t.Fatalf("sdk_helper.py: first line %q, want ready; stderr:\n%s", lines.Text(), stderr.String())
		}
		d.stop(t)
		_, _ = stdin.Write([]byte("go\n"))
		_ = stdin.Close()
		lines.Scan()
		spooled := lines.Text()
		if err := cmd.Wait(); err != nil || !strings.HasPrefix(spooled, "spooled ") {
			t.Fatalf("sdk_helper.py quit-while-down: %v, printed %q; stderr:\n%s", err, spooled, stderr.String())
		}
		t.Log("Python wrote", spooled)

		d = restartDaemon(t, d)
		c2 := dialSDK(t, ctx, d.Addr)
		h, err := c2.Open(ctx, client.ID(sess.ID), client.WithSpool(spool))
		if err != nil {
			t.Fatalf("Go Open with the Python spool: %v", err)
		}
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
		_, msgs := mustLoad(t, ctx, d.client(t), &sessiondv1.LoadSessionRequest{Ref: byID("", sess.ID)})
		checkContents(t, msgs, "spooled question", "spooled answer")
		checkEmptyDir(t, spool)
	})

	t.Run("Go spools, Python sends", func(t *testing.T) {
		d := startDaemon(t, t.TempDir())
		spool := t.TempDir()
		c := dialSDK(t, ctx, d.Addr)
		h, err := c.OpenOrCreate(ctx, client.Alias("go-to-py"), client.WithSpool(spool))
		if err != nil {
			t.Fatal(err)
		}
		d.stop(t)
		// The daemon is down: the turn is only in the spool. The program
		// "quits" without a successful Close.
		if err := h.Append(textMsg("", sessiondv1.Role_ROLE_USER, "go question"),
			textMsg("", sessiondv1.Role_ROLE_ASSISTANT, "go answer")); err != nil {
			t.Fatal(err)
		}
		if h.SpoolPath() == "" {
			t.Fatal("the Go handle has no spool file after Append")
		}
		t.Log("Go wrote", h.SpoolPath())

		d = restartDaemon(t, d)
		out, err := spoolHelper(ctx, env, "replay", d.Addr, h.ID(), spool).CombinedOutput()
		if err != nil {
			t.Fatalf("sdk_helper.py replay: %v\n%s", err, out)
		}
		if got, want := string(out), "ROLE_USER go question\nROLE_ASSISTANT go answer\n"; got != want {
			t.Errorf("Python printed %q, want %q", got, want)
		}
		_, msgs := mustLoad(t, ctx, d.client(t), &sessiondv1.LoadSessionRequest{Ref: byID("", h.ID())})
		checkContents(t, msgs, "go question", "go answer")
		checkEmptyDir(t, spool)
	})
}

// dialSDK dials addr with the Go SDK; the client is closed when the test ends.
func dialSDK(t *testing.T, ctx context.Context, addr string) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func checkContents(t *testing.T, msgs []*sessiondv1.Message, want ...string) {
	t.Helper()
	var got []string
	for _, m := range msgs {
		got = append(got, m.GetContent())
	}
	if !slices.Equal(got, want) {
		t.Errorf("stored messages %q, want %q", got, want)
	}
}

func checkEmptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("%s still holds %d files (%s...), want none once the spool was sent", dir, len(ents), ents[0].Name())
	}
}

// TestPythonREPLExample runs the Python SDK REPL of docs/python.md twice
// against the real daemon: the second run resumes the session by its alias
// and finds the first run's turn. docs/python.md must show the file verbatim.
func TestPythonREPLExample(t *testing.T) {
	env := needPython(t)
	src, err := os.ReadFile(filepath.Join(moduleRoot, "clients", "python", "repl.py"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(moduleRoot, "docs", "python.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, src) {
		t.Errorf("docs/python.md does not show clients/python/repl.py verbatim; copy the file into its code block")
	}
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, scriptTimeout)
	dir := t.TempDir()
	for run, want := range []string{"with 0 messages", "with 2 messages"} {
		cmd := exec.CommandContext(ctx, python, filepath.Join(moduleRoot, "clients", "python", "repl.py"), "py-repl", d.Addr)
		cmd.Dir = dir // the REPL's spool folder is relative
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdin = strings.NewReader(fmt.Sprintf("turn %d\n", run+1))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("repl.py run %d: %v\n%s", run+1, err, out)
		}
		if !strings.Contains(string(out), want) || !strings.Contains(string(out), fmt.Sprintf("echo: turn %d", run+1)) ||
			!strings.Contains(string(out), "saved; resume with:") {
			t.Errorf("repl.py run %d printed:\n%s\nwant %q, the echo and the resume line", run+1, out, want)
		}
	}
	checkAliasCount(t, d, "py-repl", 4)
}
