package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/chzyer/readline"
	"golang.org/x/term"
)

// errInterrupted is what a lineReader returns when Ctrl-C is pressed on an
// empty line.
var errInterrupted = errors.New("interrupted")

// lineReader reads the user's lines: through readline on a terminal, plain
// lines otherwise.
type lineReader interface {
	// ReadLine returns the next line without its newline, io.EOF at the end
	// of input (Ctrl-D), or errInterrupted.
	ReadLine() (string, error)
	Close() error
}

// isTerminal reports whether r is a terminal the REPL can edit lines on.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// plainReader reads newline-separated lines, for piped or redirected input:
// bytes pass through untouched, and nothing is echoed or prompted.
type plainReader struct{ sc *bufio.Scanner }

func newPlainReader(r io.Reader) *plainReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &plainReader{sc: sc}
}

func (p *plainReader) ReadLine() (string, error) {
	if p.sc.Scan() {
		return p.sc.Text(), nil
	}
	if err := p.sc.Err(); err != nil {
		return "", err
	}
	return "", io.EOF
}

func (p *plainReader) Close() error { return nil }

// editReader edits lines on a terminal with chzyer/readline: arrow keys,
// Emacs keys (Ctrl-A, Ctrl-E, Ctrl-W, ...), history on Up/Down and Ctrl-R
// search, kept in a history file.
type editReader struct{ rl *readline.Instance }

// newEditReader starts line editing on the terminal stdin, writing to
// stdout and stderr; historyFile "" keeps history in memory only.
func newEditReader(stdin *os.File, stdout, stderr io.Writer, historyFile string) (*editReader, error) {
	if historyFile != "" {
		// readline creates the file world-readable; conversations are not.
		if err := os.MkdirAll(filepath.Dir(historyFile), 0o700); err != nil {
			return nil, fmt.Errorf("history file: %w", err)
		}
		f, err := os.OpenFile(historyFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, fmt.Errorf("history file: %w", err)
		}
		_ = f.Close()
	}
	rl, err := readline.NewEx(&readline.Config{
		Prompt:            "> ",
		HistoryFile:       historyFile,
		HistoryLimit:      1000,
		HistorySearchFold: true,
		Stdin:             stdin,
		Stdout:            stdout,
		Stderr:            stderr,
		InterruptPrompt:   "^C",
		EOFPrompt:         "",
	})
	if err != nil {
		return nil, fmt.Errorf("line editing: %w", err)
	}
	return &editReader{rl: rl}, nil
}

// ReadLine returns the edited line. Ctrl-C discards a typed line and asks
// again, as a shell does; on an empty line it is errInterrupted.
func (e *editReader) ReadLine() (string, error) {
	for {
		line, err := e.rl.Readline()
		if errors.Is(err, readline.ErrInterrupt) {
			if line != "" {
				continue
			}
			return "", errInterrupted
		}
		return line, err
	}
}

// Stdout and Stderr write above the prompt without garbling the line being
// edited (auto-save reports arrive while the user types).
func (e *editReader) Stdout() io.Writer { return e.rl.Stdout() }
func (e *editReader) Stderr() io.Writer { return e.rl.Stderr() }

func (e *editReader) Close() error { return e.rl.Close() }

// stateDir is where the REPL keeps its spool and history:
// $XDG_STATE_HOME/sessiond, else ~/.local/state/sessiond.
func stateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "sessiond")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "sessiond")
	}
	return ""
}
