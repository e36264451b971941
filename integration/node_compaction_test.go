package integration

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// nodeCompactionTestCount is how many tests clients/node/test/compaction.test.js holds.
const nodeCompactionTestCount = 3

// TestNodeCompaction runs clients/node/test/compaction.test.js: the Agents
// SDK's OpenAIResponsesCompactionSession over a SessiondSession with the
// context view stores a compaction instead of rewriting the session.
func TestNodeCompaction(t *testing.T) {
	node, missing := exec.LookPath("node")
	needTool(t, missing, "Node.js 20 or later with npm (apt-get install nodejs npm)")
	ctx := testContext(t, scriptTimeout)
	buildNodeClient(t, ctx)
	d := startDaemon(t, t.TempDir())
	out := runScript(t, ctx, []string{"SESSIOND_ADDR=" + d.Addr}, node, "--test", "--test-reporter=spec", "clients/node/test/compaction.test.js")
	for _, want := range []string{fmt.Sprintf("pass %d\n", nodeCompactionTestCount), "skipped 0\n", "fail 0\n"} {
		if !strings.Contains(out, "ℹ "+want) {
			t.Errorf("node --test: no %q in its summary", strings.TrimSpace(want))
		}
	}
}
