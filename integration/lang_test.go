package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// The tests in this file run the other-language clients of clients/ against
// the real daemon: each conformance script walks a session through create,
// append, load, save, list and the error codes, and each README example runs
// as a reader would run it. The Go client then reads what the other language
// wrote, so a field that one side encodes differently shows up here.

// python is Debian's interpreter, which has python3-grpcio; the first python3
// on PATH may be another one without it.
const python = "/usr/bin/python3"

// scriptTimeout bounds each script run; a healthy run takes a few seconds.
const scriptTimeout = 3 * time.Minute

// Checks each conformance script runs; a script that silently drops a check
// fails the test.
const conformanceChecks = 9

// parisArgs are the tool-call arguments both conformance scripts send; the Go
// side checks that they were stored byte for byte.
const parisArgs = `{ "city":"Paris",  "units" : "metric", "note": "caf\u00e9 été 😀" }`

// needTool skips the test when a language runtime is missing on a developer's
// machine, and fails it in CI (CI=true), where a skip would hide the gap.
func needTool(t *testing.T, missing error, install string) {
	t.Helper()
	if missing == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%v; CI must install %s", missing, install)
	}
	t.Skipf("%v; install %s to run this test", missing, install)
}

// runScript runs a client program from the module root and returns its
// standard output; a non-zero exit fails the test with both outputs.
func runScript(t *testing.T, ctx context.Context, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = moduleRoot
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s %s (%v):\n%s%s", filepath.Base(name), strings.Join(args, " "),
		time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// checkConformanceOutput checks the closing line of a conformance script.
func checkConformanceOutput(t *testing.T, lang, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	want := fmt.Sprintf("%s conformance: %d passed, 0 failed", lang, conformanceChecks)
	if last != want {
		t.Errorf("closing line %q, want %q", last, want)
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "FAIL") {
			t.Errorf("%s conformance: %s", lang, l)
		}
	}
}

// checkConformanceSession reads, through the Go client, the session that a
// conformance script left behind, and checks that it is what the script
// saved last: three messages, the Paris tool call's arguments byte for byte.
func checkConformanceSession(t *testing.T, d *daemon, lang string) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	c := d.client(t)
	found := mustList(t, ctx, c, &sessiondv1.ListSessionsRequest{Labels: map[string]string{"lang": lang, "suite": "conformance"}})
	if len(found) != 1 {
		t.Fatalf("sessions labelled lang=%s: %d, want exactly one", lang, len(found))
	}
	id := found[0].GetId()
	sess, msgs := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", id)})
	if sess.GetTitle() != "Weather in Paris" || sess.GetRevision() != 4 || len(msgs) != 3 {
		t.Fatalf("session %s: title %q, revision %d, %d messages; want \"Weather in Paris\", 4, 3",
			id, sess.GetTitle(), sess.GetRevision(), len(msgs))
	}
	calls := msgs[1].GetToolCalls()
	if len(calls) != 1 || calls[0].GetId() != "call_paris" || calls[0].GetArguments() != parisArgs {
		t.Errorf("assistant tool calls as Go reads them: %v; want one call_paris with arguments %q", calls, parisArgs)
	}
	if got, want := msgs[2].GetRole(), sessiondv1.Role_ROLE_TOOL; got != want || msgs[2].GetToolCallId() != "call_paris" {
		t.Errorf("tool result: role %v, tool_call_id %q; want %v, call_paris", got, msgs[2].GetToolCallId(), want)
	}
}

// checkExampleOutput checks what a README example printed after its run-th
// run on a fresh daemon: each run appends one user and one assistant message.
func checkExampleOutput(t *testing.T, out string, run int) {
	t.Helper()
	var want []string
	for range run {
		want = append(want, "ROLE_USER What is 2+2?", "ROLE_ASSISTANT 4")
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	header := regexp.MustCompile(`^session [0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12} revision (\d+)$`)
	m := header.FindStringSubmatch(lines[0])
	if m == nil || m[1] != fmt.Sprint(run+1) {
		t.Errorf("run %d: first line %q, want \"session <uuid> revision %d\"", run, lines[0], run+1)
	}
	if got := strings.Join(lines[1:], "\n"); got != strings.Join(want, "\n") {
		t.Errorf("run %d: messages printed:\n%s\nwant:\n%s", run, got, strings.Join(want, "\n"))
	}
}

// checkAliasCount checks through the Go client how many messages the
// session with alias holds, so an example is known to have written to the
// daemon rather than only printed.
func checkAliasCount(t *testing.T, d *daemon, alias string, want int64) {
	t.Helper()
	checkAliasCountWith(t, testContext(t, 30*time.Second), d.client(t), "", alias, want)
}

// checkAliasCountWith is checkAliasCount through client c in namespace ns.
func checkAliasCountWith(t *testing.T, ctx context.Context, c sessiondv1.SessionStoreServiceClient, ns, alias string, want int64) {
	t.Helper()
	resp, err := c.GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byAlias(ns, alias)})
	if err != nil {
		t.Fatalf("GetSession %s: %v", alias, err)
	}
	if got := resp.GetSession().GetMessageCount(); got != want {
		t.Errorf("session %s holds %d messages, want %d", alias, got, want)
	}
}

func TestPythonClient(t *testing.T) {
	// The scripts of clients/python find their own folder (and so the SDK)
	// anyway; needPython's PYTHONPATH adds it for the SDK's tests.
	env := needPython(t)
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, scriptTimeout)

	t.Run("conformance", func(t *testing.T) {
		out := runScript(t, ctx, env, python, "clients/python/conformance.py", d.Addr)
		checkConformanceOutput(t, "python", out)
		checkConformanceSession(t, d, "python")
	})
	t.Run("example", func(t *testing.T) {
		for run := 1; run <= 2; run++ { // the second run resumes the session by its alias
			checkExampleOutput(t, runScript(t, ctx, env, python, "clients/python/example.py", d.Addr), run)
		}
		checkAliasCount(t, d, "python-example", 4)
	})
	// The google.rpc details of INVALID_ARGUMENT and RESOURCE_EXHAUSTED, read
	// with the generated google.rpc modules: the field and the reason
	// without parsing the text, which stays as it was.
	t.Run("error details", func(t *testing.T) {
		out := runScript(t, ctx, env, python, "clients/python/error_details.py", d.Addr)
		want := `-- bad alias
code INVALID_ARGUMENT
message alias "no/slash" has byte '/' at 2; use letters, digits, '.', '_', '-'
field alias | "no/slash" has byte '/' at 2; use letters, digits, '.', '_', '-'
reason INVALID_FIELD domain sessiond field=alias
-- title over its limit
code RESOURCE_EXHAUSTED
message title is 100000 bytes, over the max_title_bytes limit of 1024
field title | is 100000 bytes, over the max_title_bytes limit of 1024
reason OVER_LIMIT domain sessiond field=title limit=max_title_bytes max=1024 size=100000
`
		if out != want {
			t.Fatalf("clients/python/error_details.py printed:\n%s\nwant:\n%s", out, want)
		}
	})
	t.Run("example over TLS with a token", func(t *testing.T) {
		d, ca, tokEnv := startTLSExampleDaemon(t)
		for run := 1; run <= 2; run++ {
			checkExampleOutput(t, runScript(t, ctx, append(env, tokEnv...), python, "clients/python/example_tls.py", d.Addr, ca), run)
		}
		d.checkTLSExample(t, "python-tls-example")
	})
}

func TestNodeClient(t *testing.T) {
	node, missing := exec.LookPath("node")
	needTool(t, missing, "Node.js 20 or later with npm (apt-get install nodejs npm)")

	ctx := testContext(t, scriptTimeout)
	buildNodeClient(t, ctx)

	d := startDaemon(t, t.TempDir())
	t.Run("conformance", func(t *testing.T) {
		out := runScript(t, ctx, nil, node, "clients/node/conformance.js", d.Addr)
		checkConformanceOutput(t, "node", out)
		checkConformanceSession(t, d, "node")
	})
	t.Run("example", func(t *testing.T) {
		for run := 1; run <= 2; run++ { // the second run resumes the session by its alias
			checkExampleOutput(t, runScript(t, ctx, nil, node, "clients/node/example.js", d.Addr), run)
		}
		checkAliasCount(t, d, "node-example", 4)
	})
	t.Run("example over TLS with a token", func(t *testing.T) {
		d, ca, tokEnv := startTLSExampleDaemon(t)
		for run := 1; run <= 2; run++ {
			checkExampleOutput(t, runScript(t, ctx, tokEnv, node, "clients/node/example_tls.js", d.Addr, ca), run)
		}
		d.checkTLSExample(t, "node-tls-example")
	})
	t.Run("agents", func(t *testing.T) {
		runNodeSessionTests(t, ctx, node, d, nil)
	})
	t.Run("agents over TLS with a token", func(t *testing.T) {
		d, ca, tokEnv := startTLSExampleDaemon(t)
		runNodeSessionTests(t, ctx, node, d.daemon, append(tokEnv, "SESSIOND_CA="+ca))
	})
}

// buildNodeClient installs the Node.js client's packages when they are
// missing (scripts/tools.sh installs them; a developer may not have run it,
// or ran it before a dev dependency these tests use was added) and compiles
// its TypeScript once per test run (the sources do not change while the
// tests run), so the tests never run a stale dist/. A build that failed is
// tried again by the next test that needs it, which then fails with its own
// output.
func buildNodeClient(t *testing.T, ctx context.Context) {
	t.Helper()
	npm, missing := exec.LookPath("npm")
	needTool(t, missing, "npm")
	nodeClientMu.Lock()
	defer nodeClientMu.Unlock()
	if nodeClientBuilt {
		return
	}
	nodeDir := filepath.Join(moduleRoot, "clients", "node")
	for _, p := range []string{
		filepath.Join(".bin", "tsc"),
		filepath.Join("@anthropic-ai", "sdk"), // TestFormatsAgainstSDKTypes
	} {
		if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", p)); err != nil {
			runScript(t, ctx, nil, npm, "ci", "--prefix", "clients/node", "--no-audit", "--no-fund")
			break
		}
	}
	runScript(t, ctx, nil, npm, "run", "build", "--prefix", "clients/node")
	nodeClientBuilt = true
}

// nodeClientBuilt says buildNodeClient has built the Node.js client in this
// test run; nodeClientMu guards it.
var (
	nodeClientMu    sync.Mutex
	nodeClientBuilt bool
)

// nodeTestCount is how many tests clients/node/test/session.test.js holds;
// the token test is skipped on a daemon without tokens, and a run that
// skips any other fails.
const nodeTestCount = 11

// runNodeSessionTests runs the SessiondSession tests (the real
// @openai/agents runner with a fake model) against d; env adds
// SESSIOND_TOKEN and SESSIOND_NAMESPACE when the daemon wants a token (the
// token test runs only then), and SESSIOND_CA when it serves TLS.
func runNodeSessionTests(t *testing.T, ctx context.Context, node string, d *daemon, env []string) {
	t.Helper()
	env = append([]string{"SESSIOND_ADDR=" + d.Addr}, env...)
	pass, skipped := nodeTestCount, 0
	if len(env) == 1 {
		pass, skipped = nodeTestCount-1, 1
	}
	out := runScript(t, ctx, env, node, "--test", "--test-reporter=spec", "clients/node/test/session.test.js")
	for _, want := range []string{fmt.Sprintf("pass %d\n", pass), fmt.Sprintf("skipped %d\n", skipped), "fail 0\n"} {
		if !strings.Contains(out, "ℹ "+want) {
			t.Errorf("node --test: no %q in its summary", strings.TrimSpace(want))
		}
	}
}

// readmeExampleAddr is the address the documented examples use; the test
// runs them against its own daemon instead.
const readmeExampleAddr = "127.0.0.1:7437"

// TestReadmeExamples proves the documented client examples: the Python and
// Node.js examples docs/python.md and docs/node.md show must be, verbatim,
// the files the tests above run, and every grpcurl command line of
// docs/grpc.md runs here, in order, as a reader would run it, against a
// fresh daemon. What AppendMessages sent is what a later LoadSession of the
// same alias must print.
func TestReadmeExamples(t *testing.T) {
	for doc, files := range map[string][]string{
		"python.md": {"clients/python/example.py", "clients/python/example_tls.py"},
		"node.md":   {"clients/node/example.js", "clients/node/example_tls.js"},
	} {
		shown, err := os.ReadFile(filepath.Join(moduleRoot, "docs", doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			src, err := os.ReadFile(filepath.Join(moduleRoot, f))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(shown, src) {
				t.Errorf("docs/%s does not show %s verbatim; copy the file into its code block", doc, f)
			}
		}
	}

	readme, err := os.ReadFile(filepath.Join(moduleRoot, "docs", "grpc.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := grpcurlCommands(readme)
	grpcurl := lookTool(t, "grpcurl")
	bash := lookTool(t, "bash")
	d := startDaemon(t, t.TempDir())
	ctx := testContext(t, scriptTimeout)
	env := []string{"PATH=" + filepath.Dir(grpcurl) + string(os.PathListSeparator) + os.Getenv("PATH")}

	type turn struct{ Role, Content string }
	type request struct {
		Ref struct {
			Alias string `json:"alias"`
		} `json:"ref"`
		Messages []turn `json:"messages"`
	}
	sent := map[string][]turn{} // alias -> messages appended through grpcurl
	seen := map[string]bool{}
	for _, c := range cmds {
		out := runScript(t, ctx, env, bash, "-c", strings.ReplaceAll(c, readmeExampleAddr, d.Addr))
		var req request
		if m := dataFlag.FindStringSubmatch(c); m != nil {
			if err := json.Unmarshal([]byte(m[1]), &req); err != nil {
				t.Fatalf("docs/grpc.md command %q: -d is not JSON: %v", c, err)
			}
		}
		verb := "call"
		switch f := strings.Fields(c); {
		case f[len(f)-1] == "list":
			verb = "list"
			if !strings.Contains(out, "sessiond.v1.SessionStoreService") {
				t.Errorf("%q does not name sessiond.v1.SessionStoreService:\n%s", c, out)
			}
		case f[len(f)-2] == "describe":
			verb = "describe"
			if !strings.Contains(out, f[len(f)-1]) {
				t.Errorf("%q does not describe %s:\n%s", c, f[len(f)-1], out)
			}
		case strings.HasSuffix(c, "/AppendMessages"):
			verb = "AppendMessages"
			sent[req.Ref.Alias] = append(sent[req.Ref.Alias], req.Messages...)
			// proto3 JSON: 64-bit integers are strings, names lowerCamelCase.
			var resp struct {
				Revision     string `json:"revision"`
				MessageCount string `json:"messageCount"`
			}
			if err := json.Unmarshal([]byte(out), &resp); err != nil || resp.MessageCount != fmt.Sprint(len(sent[req.Ref.Alias])) {
				t.Errorf("%q answered %s (%v); want messageCount \"%d\" as a string", c, out, err, len(sent[req.Ref.Alias]))
			}
		case strings.HasSuffix(c, "/LoadSession"):
			verb = "LoadSession"
			var got []turn
			dec := json.NewDecoder(strings.NewReader(out))
			for {
				var frame struct{ Messages []turn }
				if err := dec.Decode(&frame); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatalf("%q: output is not a stream of JSON objects: %v\n%s", c, err, out)
				}
				got = append(got, frame.Messages...)
			}
			if fmt.Sprint(got) != fmt.Sprint(sent[req.Ref.Alias]) || len(got) == 0 {
				t.Errorf("%q printed messages %v, want %v (what the walkthrough appended)", c, got, sent[req.Ref.Alias])
			}
		case strings.HasSuffix(c, "/CreateSession"):
			verb = "CreateSession"
		}
		seen[verb] = true
	}
	for _, verb := range []string{"list", "describe", "CreateSession", "AppendMessages", "LoadSession"} {
		if !seen[verb] {
			t.Errorf("docs/grpc.md has no grpcurl example of %s", verb)
		}
	}
}

// dataFlag finds the request of a grpcurl command line: -d '...'.
var dataFlag = regexp.MustCompile(`-d '([^']*)'`)

// grpcurlCommands returns the grpcurl command lines of a document, in order.
func grpcurlCommands(readme []byte) []string {
	var cmds []string
	sc := bufio.NewScanner(bytes.NewReader(readme))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "grpcurl -plaintext") {
			cmds = append(cmds, line)
		}
	}
	return cmds
}
