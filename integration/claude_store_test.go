package integration

import (
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
const claudeStoreTestCount = 22

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
