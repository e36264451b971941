package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/clienttest"
)

// TestSoak runs a short soak against the real sessiond binary: traffic of
// every kind, two kill -9 and restarts, no acknowledged append lost, and an
// RSS sample at each tick.
func TestSoak(t *testing.T) {
	bin, err := clienttest.BuildDaemon(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = run(t.Context(), []string{"--json", "soak", "--sessiond", bin, "--dir", filepath.Join(t.TempDir(), "data"),
		"--duration", "7s", "--kill-every", "3s", "--sample", "1s", "--clients", "4", "--watchers", "8", "--stalled", "2"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, stderr.String())
	}
	var rep soakReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
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
	if !strings.Contains(stderr.String(), "rss") {
		t.Errorf("no progress lines on stderr: %q", stderr.String())
	}
}
