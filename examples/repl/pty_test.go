package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/internal/syncbuf"
)

// openPTY opens a pseudo-terminal pair of 80x24.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 80}); err != nil {
		t.Fatalf("pty size: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = master.Close(); _ = tty.Close() })
	return master, tty
}

// TestLineEditingOnATerminal runs the REPL binary on a pseudo-terminal, as
// a person (or tmux) does, and edits lines with the keys a shell user
// expects: none of the key sequences reach the stored messages, and the
// history file keeps the lines for the next run.
func TestLineEditingOnATerminal(t *testing.T) {
	needBinaries(t)
	srv := loopbackServer(t)
	master, tty := openPTY(t)
	state := t.TempDir()
	cmd := exec.Command(replBin, "--addr", srv.Addr(), "--session", "typed", "--autosave", "0")
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state, "TERM=xterm")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var out syncbuf.Buffer // what the REPL writes to its terminal
	go func() { _, _ = io.Copy(&out, master) }()

	seen := 0 // how much of the screen earlier waits consumed
	waitFor := func(s string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			all := out.String()
			if i := strings.Index(all[seen:], s); i >= 0 {
				seen += i + len(s)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q on the terminal within 20s; screen:\n%q", s, all)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	typeKeys := func(keys string) {
		t.Helper()
		waitFor("> ") // the prompt: readline is reading
		if _, err := master.WriteString(keys); err != nil {
			t.Fatal(err)
		}
	}
	const (
		left, up     = "\x1b[D", "\x1b[A"
		ctrlA, ctrlE = "\x01", "\x05"
		ctrlR, ctrlC = "\x12", "\x03"
		enter, ctrlD = "\r", "\x04"
	)
	waitFor("new session ")
	typeKeys("helo" + left + "l" + enter) // fix a typo with the arrow key
	waitFor("echo: hello")
	typeKeys("world" + ctrlA + "big " + ctrlE + "!" + enter)
	waitFor("echo: big world!")
	typeKeys(ctrlR + "hel" + enter) // search the history
	waitFor("echo: hello")
	typeKeys(up + up + enter) // two lines back
	waitFor("echo: big world!")
	typeKeys("discarded" + ctrlC) // Ctrl-C drops a typed line
	typeKeys(ctrlD)               // and Ctrl-D quits, saving
	waitFor("resume with: repl --addr " + srv.Addr() + " --session typed")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("repl exit: %v; screen:\n%q", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("repl did not exit after Ctrl-D; screen:\n%q", out.String())
	}

	_, got := stored(t, srv.Addr(), client.Alias("typed"))
	want := []string{"hello", "echo: hello", "big world!", "echo: big world!",
		"hello", "echo: hello", "big world!", "echo: big world!"}
	if !slices.Equal(got, want) {
		t.Errorf("stored %q, want %q", got, want)
	}
	hist, err := os.ReadFile(filepath.Join(state, "sessiond", "repl_history"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(hist)), "\n"); !slices.Equal(lines, []string{"hello", "big world!", "hello", "big world!"}) {
		t.Errorf("history file holds %q", lines)
	}
	if fi, err := os.Stat(filepath.Join(state, "sessiond", "repl_history")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("history file mode %v (%v), want 0600", fi.Mode(), err)
	}
}
