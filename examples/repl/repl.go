package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	"github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// errUsage marks a bad command line (exit code 2).
var errUsage = errors.New("usage")

// exitSaveTimeout bounds the final save when the REPL ends (the run ctx may
// already be cancelled by SIGINT by then).
const exitSaveTimeout = 30 * time.Second

const helpText = `Type a line to chat. Commands:
  /sessions          list the sessions (id, alias, updated, messages)
  /save              save now
  /load ID|ALIAS     save this session, then switch to another
  /reset             clear this session's messages (same id)
  /fork              continue in a copy of this session
  /undo              drop the last user message and everything after it
  /help              this text
  /quit              save and quit (also Ctrl-D, Ctrl-C)
`

// repl is one running REPL.
type repl struct {
	c      *client.Client
	h      *client.Handle
	addr   string
	ns     string
	hopts  []client.HandleOption
	out    io.Writer // stdout, safe for concurrent use
	errOut io.Writer // stderr, safe for concurrent use
	prompt bool
}

// lockedWriter serialises writes, since auto-save reports from its own
// goroutine.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("repl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", client.DefaultAddr, "sessiond address: host:port or unix:///path")
	session := fs.String("session", "", "resume this session, by id or alias (a new alias is created)")
	ns := fs.String("namespace", "", "session namespace")
	autosave := fs.Duration("autosave", client.DefaultAutoSaveInterval, "auto-save interval (0 disables)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "repl: unexpected arguments %q\n", fs.Args())
		return errUsage
	}

	r := &repl{
		addr:   *addr,
		ns:     *ns,
		out:    &lockedWriter{w: stdout},
		errOut: &lockedWriter{w: stderr},
		prompt: isTerminal(stdin),
	}
	r.hopts = append(r.hopts, client.WithErrorHandler(func(err error) {
		fmt.Fprintf(r.errOut, "auto-save: %v (the turns stay here and are retried)\n", err)
	}))
	if *autosave > 0 {
		r.hopts = append(r.hopts, client.WithAutoSave(*autosave))
	}

	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	c, err := client.Dial(dctx, *addr, client.WithNamespace(*ns))
	cancel()
	if err != nil {
		return fmt.Errorf("is sessiond running at %s? %w", *addr, err)
	}
	defer c.Close()
	r.c = c

	if *session == "" {
		r.h, err = c.New(ctx, r.hopts...)
	} else if ref := client.ParseRef(*session); ref.ID() != "" {
		r.h, err = c.Open(ctx, ref, r.hopts...)
	} else {
		r.h, err = c.OpenOrCreate(ctx, ref, r.hopts...)
	}
	if err != nil {
		return fmt.Errorf("open session: %w", err)
	}
	r.greet()
	return r.loop(ctx, stdin)
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// greet names the session and replays its history.
func (r *repl) greet() {
	msgs := r.h.Messages()
	if len(msgs) == 0 {
		fmt.Fprintf(r.out, "new session %s; /help for commands\n", r.h.ID())
		return
	}
	fmt.Fprintf(r.out, "resumed session %s (%d messages)\n", r.h.ID(), len(msgs))
	printMessages(r.out, msgs)
}

func speaker(role sessiondv1.Role) string {
	switch role {
	case sessiondv1.Role_ROLE_USER:
		return "you"
	case sessiondv1.Role_ROLE_ASSISTANT:
		return "assistant"
	case sessiondv1.Role_ROLE_SYSTEM:
		return "system"
	case sessiondv1.Role_ROLE_TOOL:
		return "tool"
	}
	return "?"
}

// loop reads lines until /quit, EOF or ctx ends (SIGINT), then saves.
func (r *repl) loop(ctx context.Context, stdin io.Reader) error {
	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		// This goroutine may outlive run when ctx ends while it waits for
		// input; the process exits right after, in main.
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
	}()
	for {
		if r.prompt {
			fmt.Fprint(r.out, "> ")
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(r.out)
			return r.quit(ctx)
		case err := <-readErr:
			if err != nil {
				fmt.Fprintf(r.errOut, "reading input: %v\n", err)
			}
			return r.quit(ctx)
		case line := <-lines:
			done, err := r.handle(ctx, strings.TrimSpace(line))
			if err != nil {
				fmt.Fprintf(r.errOut, "error: %v\n", err)
			}
			if done {
				return r.quit(ctx)
			}
		}
	}
}

// handle runs one line; done means quit.
func (r *repl) handle(ctx context.Context, line string) (done bool, err error) {
	if line == "" {
		return false, nil
	}
	if !strings.HasPrefix(line, "/") {
		return false, r.chat(line)
	}
	cmd, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch cmd {
	case "/quit", "/exit":
		return true, nil
	case "/help":
		fmt.Fprint(r.out, helpText)
	case "/save":
		if err := r.h.Save(ctx); err != nil {
			return false, err
		}
		fmt.Fprintf(r.out, "saved session %s (revision %d)\n", r.h.ID(), r.h.Revision())
	case "/sessions":
		return false, r.sessions(ctx)
	case "/load":
		if arg == "" {
			return false, errors.New("usage: /load ID|ALIAS")
		}
		return false, r.load(ctx, arg)
	case "/reset":
		if err := r.h.Reset(ctx); err != nil {
			return false, err
		}
		fmt.Fprintf(r.out, "session %s cleared\n", r.h.ID())
	case "/fork":
		f, err := r.h.Fork(ctx, client.ForkOptions{}, r.hopts...)
		if err != nil {
			return false, err
		}
		old := r.h
		r.h = f
		if err := old.Close(ctx); err != nil {
			fmt.Fprintf(r.errOut, "closing %s: %v\n", old.ID(), err)
		}
		fmt.Fprintf(r.out, "forked %s into %s; now in %s\n", old.ID(), f.ID(), f.ID())
	case "/undo":
		return false, r.undo(ctx)
	default:
		return false, fmt.Errorf("unknown command %s; /help lists them", cmd)
	}
	return false, nil
}

// chat appends the user's turn and the stand-in assistant's answer.
func (r *repl) chat(text string) error {
	reply := assistant(text)
	err := r.h.Append(
		&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: text},
		&sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: reply,
			Metadata: map[string]string{"model": "echo"}},
	)
	if err != nil {
		return err
	}
	fmt.Fprintf(r.out, "assistant: %s\n", reply)
	return nil
}

// assistant is the stand-in model: it echoes.
func assistant(text string) string {
	return "echo: " + text
}

func (r *repl) sessions(ctx context.Context) error {
	tw := tabwriter.NewWriter(r.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tALIAS\tUPDATED\tMESSAGES")
	for s, err := range r.c.List(ctx, client.ListOptions{}) {
		if err != nil {
			return err
		}
		cur := ""
		if s.ID == r.h.ID() {
			cur = " (current)"
			if n := r.h.Unsaved(); n > 0 {
				cur = fmt.Sprintf(" (current, +%d unsaved)", n)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d%s\n", s.ID, dash(s.Alias), s.UpdatedAt.Local().Format(time.DateTime), s.MessageCount, cur)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// load saves the current session, then switches to another; on failure the
// current one stays.
func (r *repl) load(ctx context.Context, target string) error {
	if err := r.h.Save(ctx); err != nil {
		return fmt.Errorf("saving %s first: %w", r.h.ID(), err)
	}
	next, err := r.c.Open(ctx, client.ParseRef(target), r.hopts...)
	if err != nil {
		return err
	}
	old := r.h
	r.h = next
	if err := old.Close(ctx); err != nil {
		fmt.Fprintf(r.errOut, "closing %s: %v\n", old.ID(), err)
	}
	r.greet()
	return nil
}

// undo drops the last user message and everything after it.
func (r *repl) undo(ctx context.Context) error {
	msgs := r.h.Messages()
	last := -1
	for i, m := range msgs {
		if m.GetRole() == sessiondv1.Role_ROLE_USER {
			last = i
		}
	}
	if last < 0 {
		fmt.Fprintln(r.out, "nothing to undo")
		return nil
	}
	if err := r.h.Rewind(ctx, int64(last)); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "undid: %s\n", msgs[last].GetContent())
	return nil
}

// quit saves the session and prints how to resume it. If the save fails,
// the unsaved turns are printed so that nothing is lost.
func (r *repl) quit(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), exitSaveTimeout)
	defer cancel()
	if err := r.h.Close(cctx); err != nil {
		fmt.Fprintf(r.errOut, "could not save session %s: %v\nunsaved turns:\n", r.h.ID(), err)
		msgs := r.h.Messages()
		printMessages(r.errOut, msgs[len(msgs)-r.h.Unsaved():])
		return err
	}
	fmt.Fprintf(r.out, "saved session %s\n", r.h.ID())
	fmt.Fprintf(r.out, "resume with: %s\n", r.resumeCommand())
	return nil
}

// printMessages writes msgs one a line, as "speaker: content".
func printMessages(w io.Writer, msgs []*sessiondv1.Message) {
	for _, m := range msgs {
		fmt.Fprintf(w, "%s: %s\n", speaker(m.GetRole()), m.GetContent())
	}
}

// resumeCommand is the exact command line that reopens this session.
func (r *repl) resumeCommand() string {
	cmd := fmt.Sprintf("repl --addr %s --session %s", r.addr, r.h.ID())
	if r.ns != "" {
		cmd += " --namespace " + r.ns
	}
	return cmd
}
