package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/sessiond/sessiond/clienttest"
)

// TestStartup times two start-ups of the real sessiond binary after a clean
// stop and two after kill -9 under append load.
func TestStartup(t *testing.T) {
	bin, err := clienttest.BuildDaemon(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = run(t.Context(), []string{"--json", "startup", "--sessiond", bin, "--dir", filepath.Join(t.TempDir(), "data"),
		"--repeat", "2", "--load", "500ms", "--clients", "2"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("startup: %v\n%s", err, stderr.String())
	}
	var rep startupReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
	if len(rep.CleanMS) != 2 || len(rep.KilledMS) != 2 || rep.CleanMSMedian <= 0 || rep.KilledMSMedian <= 0 || rep.Appends == 0 {
		t.Errorf("report %+v: want 2 timed start-ups of each kind and appends before the kills", rep)
	}
}

