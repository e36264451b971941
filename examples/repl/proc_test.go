package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// replProc is the REPL binary running with piped stdin, as a script or a
// test drives it.
type replProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // stdout and stderr lines, "out: " or "err: " first
	done  chan struct{}
	err   error // the exit, once done is closed

	mu  sync.Mutex // guards log
	log []string   // the transcript: what was typed and printed
}

// startREPL runs the REPL binary with args and its state (spool, history)
// under stateHome.
func startREPL(t *testing.T, stateHome string, args ...string) *replProc {
	t.Helper()
	cmd := exec.Command(replBin, args...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+stateHome)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &replProc{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 1000), done: make(chan struct{})}
	p.note("$ repl " + strings.Join(args, " "))
	var readers sync.WaitGroup
	for _, r := range []struct {
		tag string
		rd  io.Reader
	}{{"out: ", stdout}, {"err: ", stderr}} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			sc := bufio.NewScanner(r.rd)
			for sc.Scan() {
				p.note(r.tag + sc.Text())
				p.lines <- r.tag + sc.Text()
			}
		}()
	}
	go func() {
		readers.Wait()
		p.err = cmd.Wait()
		close(p.lines)
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = stdin.Close()
	})
	return p
}

func (p *replProc) note(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = append(p.log, s)
}

// transcript returns what was typed ("in:") and printed so far.
func (p *replProc) transcript() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

// send types a line.
func (p *replProc) send(line string) {
	p.t.Helper()
	p.note("in:  " + line)
	if _, err := fmt.Fprintln(p.stdin, line); err != nil {
		p.t.Fatalf("typing %q: %v\n%s", line, err, p.transcript())
	}
}

// signal sends sig to the REPL.
func (p *replProc) signal(sig syscall.Signal) {
	p.t.Helper()
	p.note(fmt.Sprintf("(%v)", sig))
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// waitFor returns the next stdout or stderr line that contains s (or one of
// more), without its tag.
func (p *replProc) waitFor(s string, more ...string) string {
	p.t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("the REPL ended before printing %q:\n%s", s, p.transcript())
			}
			for _, sub := range append([]string{s}, more...) {
				if strings.Contains(l, sub) {
					return l[len("out: "):]
				}
			}
		case <-timeout:
			p.t.Fatalf("no %q within 20s:\n%s", s, p.transcript())
		}
	}
}

// running reports whether the process is still running.
func (p *replProc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// wait closes stdin and waits (up to 40s) for the REPL to exit.
func (p *replProc) wait() error {
	p.t.Helper()
	_ = p.stdin.Close()
	select {
	case <-p.done:
		p.note(fmt.Sprintf("(exit: %v)", p.err))
		return p.err
	case <-time.After(40 * time.Second):
		p.t.Fatalf("the REPL did not exit within 40s:\n%s", p.transcript())
		return nil
	}
}
