package integration

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The tests in this file run the Node.js package's SessiondSessionStore (the
// Claude Agent SDK's SessionStore) against the real daemon: the SDK's 14
// conformance contracts and what sessiond adds to them.

// claudeStoreTestCount is how many tests clients/node/test/store.test.js
// holds; every one must run and pass.
const claudeStoreTestCount = 23

// needClaudeSDK installs the Node.js client's packages when the Claude
// Agent SDK (a dev dependency the store's tests use) is missing, and builds
// the client.
func needClaudeSDK(t *testing.T) string {
	t.Helper()
	node, missing := exec.LookPath("node")
	needTool(t, missing, "Node.js 20 or later with npm (apt-get install nodejs npm)")
	ctx := testContext(t, scriptTimeout)
	if _, err := os.Stat(filepath.Join(moduleRoot, "clients", "node", "node_modules", "@anthropic-ai", "claude-agent-sdk")); err != nil {
		npm, missing := exec.LookPath("npm")
		needTool(t, missing, "npm")
		runScript(t, ctx, nil, npm, "ci", "--prefix", "clients/node", "--no-audit", "--no-fund")
	}
	buildNodeClient(t, ctx)
	return node
}

func TestClaudeSessionStore(t *testing.T) {
	node := needClaudeSDK(t)
	ctx := testContext(t, scriptTimeout)
	d := startDaemon(t, t.TempDir())
	// A second daemon with tokens, for the namespace test: writer-a may
	// only reach team-a, writer-b only team-b.
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	authd := startDaemon(t, filepath.Join(dir, "data"), "--auth-tokens", toks.file)
	env := []string{
		"SESSIOND_ADDR=" + d.Addr, "SESSIOND_BIN=" + sessiondBin,
		"SESSIOND_AUTH_ADDR=" + authd.Addr,
		"SESSIOND_TOKEN_A=" + toks.writeA, "SESSIOND_NAMESPACE_A=" + nsA,
		"SESSIOND_TOKEN_B=" + toks.writeB, "SESSIOND_NAMESPACE_B=" + nsB,
	}
	out := runScript(t, ctx, env, node, "--test", "--test-reporter=spec", "clients/node/test/store.test.js")
	for n := 1; n <= 14; n++ {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^✔ contract %d: `, n)).MatchString(out) {
			t.Errorf("contract %d did not pass", n)
		}
	}
	for _, want := range []string{fmt.Sprintf("pass %d\n", claudeStoreTestCount), "skipped 0\n", "fail 0\n"} {
		if !strings.Contains(out, "ℹ "+want) {
			t.Errorf("node --test: no %q in its summary", strings.TrimSpace(want))
		}
	}
}

// startModelStub starts clients/node/test/model_stub.js, the stand-in for
// the Anthropic and OpenAI APIs, and returns its base URL.
func startModelStub(t *testing.T, node string) string {
	t.Helper()
	cmd := exec.Command(node, "clients/node/test/model_stub.js")
	cmd.Dir = moduleRoot
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("model stub: %v", err)
	}
	return strings.TrimSpace(line)
}

// TestReadmeAgentExamples runs docs/node.md's OpenAI Agents SDK and Claude
// Agent SDK examples, which must be, verbatim, the files run here, against
// the daemon and the model stub (no API key needed), then shows the Claude
// transcript with sessionctl.
func TestReadmeAgentExamples(t *testing.T) {
	node := needClaudeSDK(t)
	ctx := testContext(t, scriptTimeout)
	readme, err := os.ReadFile(filepath.Join(moduleRoot, "docs", "node.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"clients/node/example_agents.mjs", "clients/node/example_claude.mjs"} {
		b, err := os.ReadFile(filepath.Join(moduleRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(readme), "```js\n"+string(b)+"```\n") {
			t.Errorf("docs/node.md does not show %s verbatim", f)
		}
	}
	d := startDaemon(t, t.TempDir())
	stub := startModelStub(t, node)

	t.Run("openai-agents", func(t *testing.T) {
		env := []string{"OPENAI_API_KEY=stub", "OPENAI_BASE_URL=" + stub + "/v1", "OPENAI_AGENTS_DISABLE_TRACING=1"}
		for run, items := range []int{2, 4} {
			out := runScript(t, ctx, env, node, "clients/node/example_agents.mjs", d.Addr)
			want := regexp.MustCompile(fmt.Sprintf(`^Paris\.\nsession [0-9a-f-]{36} holds %d items\n$`, items))
			if !want.MatchString(out) {
				t.Errorf("run %d printed %q, want %s", run+1, out, want)
			}
		}
	})

	t.Run("claude-agent-sdk", func(t *testing.T) {
		// Each run has a config dir of its own, as on another machine: the
		// second finds the first's transcript only in sessiond.
		turn := func(args ...string) string {
			env := []string{"ANTHROPIC_API_KEY=stub", "ANTHROPIC_BASE_URL=" + stub, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "CLAUDE_CONFIG_DIR=" + t.TempDir()}
			out := runScript(t, ctx, env, node, append([]string{"clients/node/example_claude.mjs", d.Addr}, args...)...)
			m := regexp.MustCompile(`^success ([0-9a-f-]{36}) Paris\.\n$`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("printed %q, want success, the session id and the answer", out)
			}
			return m[1]
		}
		first := turn()
		if second := turn(first); second != first {
			t.Errorf("the resumed run's session is %s, want %s", second, first)
		}
		ctl := func(args ...string) string {
			return runScript(t, ctx, nil, sessionctlBin, append([]string{"--addr", d.Addr, "--namespace", "claude"}, args...)...)
		}
		rows := strings.Split(strings.TrimSpace(ctl("ls", "--label", "claude.session_id="+first)), "\n")
		if len(rows) != 2 {
			t.Fatalf("sessionctl ls: %d sessions carry the transcript's label, want 1", len(rows)-1)
		}
		show := ctl("show", strings.Fields(rows[1])[0])
		for _, want := range []string{
			"user\n    What is the capital of France?\n", "user\n    And the capital of Norway?\n",
			"assistant [", "    Paris.\n", "claude.transcript=main",
		} {
			if !strings.Contains(show, want) {
				t.Errorf("sessionctl show has no %q", want)
			}
		}
	})
}
