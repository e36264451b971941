package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// TestSpoolAcrossDaemonOutage is the promise of the spool, with the real
// daemon and the real REPL binaries: kill the daemon, type turns, quit the
// REPL (it says at once that it is saving and retrying; Ctrl-C stops it),
// start the daemon, start the REPL: every turn is stored exactly once.
func TestSpoolAcrossDaemonOutage(t *testing.T) {
	needBinaries(t)
	t.Run("quit", func(t *testing.T) { testSpoolOutage(t, false) })
	t.Run("crash", func(t *testing.T) { testSpoolOutage(t, true) })
}

// testSpoolOutage runs the outage; crash kills the REPL with SIGKILL
// instead of quitting it.
func testSpoolOutage(t *testing.T, crash bool) {
	d := clienttest.StartDaemon(t, daemonBin, t.TempDir(), "127.0.0.1:0")
	state := t.TempDir()
	p := startREPL(t, state, "--addr", d.Addr, "--session", "outage")
	p.waitFor("new session ")
	p.send("before the outage")
	p.send("/save")
	p.waitFor("saved session ")

	d.Kill(t)
	turns := []string{"typed while down 1", "typed while down 2", "typed while down 3"}
	for _, turn := range turns {
		p.send(turn)
		p.waitFor("assistant: echo: " + turn)
	}
	if crash {
		p.signal(syscall.SIGKILL)
		var exit *exec.ExitError
		if err := p.wait(); !errors.As(err, &exit) {
			t.Fatalf("repl exit after SIGKILL = %v", err)
		}
		t.Logf("first run:\n%s", p.transcript())
		restartAndCheck(t, d, state, []string{"--addr", d.Addr, "--session", "outage"}, turns)
		return
	}
	p.send("/quit")
	// Said at once, long before the retries (30 s) give up.
	p.waitFor("is not answering; your 6 unsaved messages are safe in the spool " + filepath.Join(state, "sessiond", "spool"))
	p.waitFor("saving: retrying for up to 30s (Ctrl-C stops waiting)")
	if !p.running() {
		t.Fatalf("the REPL gave up instead of retrying:\n%s", p.transcript())
	}
	p.signal(syscall.SIGINT)
	p.waitFor("6 unsaved messages are kept in")
	resume := strings.Fields(strings.TrimSpace(p.waitFor("repl --addr")))
	var exit *exec.ExitError
	if err := p.wait(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("repl exit = %v, want status 1 (not saved)\n%s", err, p.transcript())
	}
	if want := []string{"repl", "--addr", d.Addr, "--session", "outage"}; !slices.Equal(resume, want) {
		t.Errorf("resume command %q, want %q", resume, want)
	}
	spooled, _ := filepath.Glob(filepath.Join(state, "sessiond", "spool", "*.spool"))
	if len(spooled) != 1 {
		t.Fatalf("spool files after the quit: %q", spooled)
	}
	t.Logf("first run:\n%s", p.transcript())
	restartAndCheck(t, d, state, resume[1:], turns)
}

// restartAndCheck starts the daemon again and the REPL with args, quits it,
// and checks that the first turn and turns are stored once each, and the
// spool is empty.
func restartAndCheck(t *testing.T, d *clienttest.Daemon, state string, args, turns []string) {
	t.Helper()
	d = d.Restart(t)
	p2 := startREPL(t, state, args...)
	p2.waitFor("resumed session ")
	p2.send("/quit")
	p2.waitFor("resume with: repl --addr " + d.Addr + " --session outage")
	if err := p2.wait(); err != nil {
		t.Fatalf("second run: %v\n%s", err, p2.transcript())
	}
	t.Logf("second run:\n%s", p2.transcript())

	want := []string{"before the outage", "echo: before the outage"}
	for _, turn := range turns {
		want = append(want, turn, "echo: "+turn)
	}
	_, got := stored(t, d.Addr, client.Alias("outage"))
	if !slices.Equal(got, want) {
		t.Errorf("stored = %q, want each turn once: %q", got, want)
	}
	if left, _ := os.ReadDir(filepath.Join(state, "sessiond", "spool")); len(left) != 0 {
		t.Errorf("spool folder after the replay holds %d files", len(left))
	}
	d.Stop(t)
}

// TestDamagedSpool: a damaged spool file is reported in words, kept aside,
// and the REPL opens the session all the same.
func TestDamagedSpool(t *testing.T) {
	srv := loopbackServer(t)
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	spoolDir := filepath.Join(state, "sessiond", "spool")
	c, err := client.Dial(t.Context(), srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := c.OpenOrCreate(t.Context(), client.Alias("damaged"), client.WithSpool(spoolDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "lost to a bad disk"}); err != nil {
		t.Fatal(err)
	}
	p := h.SpoolPath() // h is abandoned, as by a crash
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b[:len(b)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut := runREPL(t, []string{"--addr", srv.Addr(), "--session", "damaged"}, "/quit\n")
	want := "warning: spool file " + p + ": damaged: "
	if !strings.Contains(errOut, want) || !strings.Contains(errOut, "kept as "+p+".damaged\n") {
		t.Errorf("stderr lacks %q ... kept as %s.damaged:\n%s", want, p, errOut)
	}
	if !strings.Contains(out, "new session "+h.ID()) {
		t.Errorf("the REPL did not open the session:\n%s", out)
	}
	if _, err := os.Stat(p + ".damaged"); err != nil {
		t.Errorf("damaged spool not kept: %v", err)
	}
}
