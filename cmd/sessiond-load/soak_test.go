package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/clienttest"
)

// runDaemonMode runs mode (soak or startup) with args against the real
// sessiond binary over a new data dir, decodes its JSON report into rep,
// and returns what it wrote on stderr.
func runDaemonMode(t *testing.T, rep any, mode string, args ...string) string {
	t.Helper()
	bin, err := clienttest.BuildDaemon(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	args = append([]string{"--json", mode, "--sessiond", bin, "--dir", filepath.Join(t.TempDir(), "data")}, args...)
	if err := run(t.Context(), args, &stdout, &stderr); err != nil {
		t.Fatalf("%s: %v\n%s", mode, err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), rep); err != nil {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
	return stderr.String()
}

// TestSoak runs a short soak against the real sessiond binary: traffic of
// every kind, at least two kill -9 and restarts, no acknowledged append lost, and an
// RSS sample at each tick.
func TestSoak(t *testing.T) {
	var rep soakReport
	stderr := runDaemonMode(t, &rep, "soak", "--duration", "7s", "--kill-every", "3s", "--sample", "1s", "--clients", "4", "--watchers", "8", "--stalled", "2")
	// At least 2 kills: a restart slowed by a busy machine can leave one
	// more kill tick pending before the run ends.
	if rep.Kills < 2 || rep.Lost != 0 || rep.Appends == 0 || rep.WatchEvents == 0 {
		t.Errorf("report %+v: want at least 2 kills, appends and watch events, nothing lost", rep)
	}
	if len(rep.Samples) < 5 {
		t.Errorf("%d RSS samples, want one a second", len(rep.Samples))
	}
	for _, s := range rep.Samples {
		if s.RSSMiB <= 0 {
			t.Errorf("sample %+v has no RSS", s)
		}
	}
	if !strings.Contains(stderr, "rss") {
		t.Errorf("no progress lines on stderr: %q", stderr)
	}
}
