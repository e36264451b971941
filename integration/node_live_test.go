package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// nodeLiveTestCount is how many tests clients/node/test/live.test.js holds;
// every one must run and pass.
const nodeLiveTestCount = 8

// TestNodeLiveTurns runs clients/node/test/live.test.js, the Node.js
// client's live turns (SessiondSession.openTurn, resumeTurn and Turn),
// against the real daemon (and, for the restart and idle-timeout tests,
// daemons of its own from SESSIOND_BIN); then clients/node/example_live.mjs,
// which clients/node/README.md shows verbatim, against the model stub.
func TestNodeLiveTurns(t *testing.T) {
	node, missing := exec.LookPath("node")
	needTool(t, missing, "Node.js 20 or later with npm (apt-get install nodejs npm)")
	ctx := testContext(t, scriptTimeout)
	buildNodeClient(t, ctx) // installs @anthropic-ai/sdk too when it is missing
	d := startDaemon(t, t.TempDir())

	t.Run("tests", func(t *testing.T) {
		env := []string{"SESSIOND_ADDR=" + d.Addr, "SESSIOND_BIN=" + sessiondBin}
		out := runScript(t, ctx, env, node, "--test", "--test-reporter=spec", "clients/node/test/live.test.js")
		for _, want := range []string{fmt.Sprintf("pass %d\n", nodeLiveTestCount), "skipped 0\n", "fail 0\n"} {
			if !strings.Contains(out, "ℹ "+want) {
				t.Errorf("node --test: no %q in its summary", strings.TrimSpace(want))
			}
		}
	})

	t.Run("example", func(t *testing.T) {
		const example = "clients/node/example_live.mjs"
		src, err := os.ReadFile(filepath.Join(moduleRoot, example))
		if err != nil {
			t.Fatal(err)
		}
		readme, err := os.ReadFile(filepath.Join(moduleRoot, "clients", "node", "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(readme), "```js\n"+string(src)+"```\n") {
			t.Errorf("clients/node/README.md does not show %s verbatim", example)
		}
		stub := startModelStub(t, node)
		env := []string{"ANTHROPIC_API_KEY=stub", "ANTHROPIC_BASE_URL=" + stub}
		for run, items := range []int{2, 4} { // the second run resumes the session by its alias
			out := runScript(t, ctx, env, node, example, d.Addr)
			want := regexp.MustCompile(fmt.Sprintf(`^Paris\.\nsession [0-9a-f-]{36} holds %d items\n$`, items))
			if !want.MatchString(out) {
				t.Errorf("run %d printed %q, want %s", run+1, out, want)
			}
		}
		_, msgs, _, err := loadSession(ctx, d.client(t), &sessiondv1.LoadSessionRequest{Ref: byAlias("", "live-example")})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 4 {
			t.Fatalf("the session holds %d messages, want 4", len(msgs))
		}
		for _, m := range []*sessiondv1.Message{msgs[1], msgs[3]} {
			if m.GetContent() != "Paris." || m.GetState() != sessiondv1.MessageState_MESSAGE_STATE_COMPLETE ||
				m.GetModel() != "claude-haiku-4-5" || m.GetUsage().GetInputTokens() != 12 || m.GetUsage().GetOutputTokens() != 3 {
				t.Errorf("the answer is stored as %v, want the finished turn: Paris., its model and usage", m)
			}
		}
	})
}
