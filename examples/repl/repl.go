package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/client"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// errUsage marks a bad command line (exit code 2).
var errUsage = errors.New("usage")

// errReported marks a failure the REPL has already explained on stderr
// (exit code 1, nothing more printed).
var errReported = errors.New("reported")

// Time limits. exitSaveTimeout bounds the retries of the final save; a
// first attempt that fails within firstSaveTimeout (the daemon is down or
// not answering) makes the REPL say so at once.
const (
	exitSaveTimeout  = 30 * time.Second
	firstSaveTimeout = 3 * time.Second
	dialTimeout      = 10 * time.Second
)

const helpText = `Type a line to chat. Commands:
  /sessions          list the sessions (id, alias, updated, messages)
  /save              save now
  /load ID|ALIAS     save this session, then switch to another
  /reset             clear this session's messages (same id)
  /fork              continue in a copy of this session
  /undo              drop the last user message and everything after it
  /help              this text
  /quit              save and quit (also Ctrl-D, or Ctrl-C on an empty line)
On a terminal: arrow keys and Ctrl-A/Ctrl-E move, Up/Down and Ctrl-R search
the history. Ctrl-C while saving stops waiting; unsaved turns stay spooled.
`

// repl is one running REPL.
type repl struct {
	c          *client.Client
	h          *client.Handle
	addr       string
	ns         string
	spoolDir   string // "" when spooling is off
	spoolFlag  string // --spool-dir as given, for the resume command
	hopts      []client.HandleOption
	out        io.Writer // stdout, safe for concurrent use
	errOut     io.Writer // stderr, safe for concurrent use
	interrupts <-chan os.Signal
	resumeTLS  string      // TLS flags for the resume command
	model      *chatModel  // nil: the echoing stand-in answers
	unfinished *liveAnswer // an answer the daemon holds open that could not be finished yet
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

// run is the whole REPL. interrupts carries SIGINT and SIGTERM (nil in
// tests): at the prompt one quits (saving), during a command it cancels
// the command, and during the final save it stops the retries. ctx ending
// quits too.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, interrupts <-chan os.Signal) error {
	fs := flag.NewFlagSet("repl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	state := stateDir()
	defSpool, defHistory := "", ""
	if state != "" {
		defSpool, defHistory = filepath.Join(state, "spool"), filepath.Join(state, "repl_history")
	}
	addr := fs.String("addr", client.DefaultAddr, "sessiond address: host:port or unix:///path")
	session := fs.String("session", "", "resume this session, by id or alias (a new alias is created)")
	ns := fs.String("namespace", "", "session namespace")
	autosave := fs.Duration("autosave", client.DefaultAutoSaveInterval, "auto-save interval (0 disables)")
	spoolDir := fs.String("spool-dir", defSpool, "keep unsaved turns in this folder until sessiond has them (\"\" or --no-spool: off)")
	noSpool := fs.Bool("no-spool", false, "keep unsaved turns in memory only")
	history := fs.String("history-file", defHistory, "line-editing history on a terminal (\"\": none)")
	baseURL := fs.String("openai-base-url", "", "answer with the model of this OpenAI-compatible chat completions endpoint, such as https://api.openai.com/v1 or http://127.0.0.1:8080/v1 (API key from $OPENAI_API_KEY); empty: echo")
	modelName := fs.String("model", "", "the model to ask (with --openai-base-url)")
	sec := addSecurityFlags(fs)
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

	dopts, err := sec.dialOptions()
	if err != nil {
		fmt.Fprintf(stderr, "repl: %v\n", err)
		return errUsage
	}
	r := &repl{addr: *addr, ns: *ns, interrupts: interrupts, resumeTLS: sec.resumeFlags()}
	if *baseURL != "" {
		if r.model, err = newChatModel(*baseURL, os.Getenv("OPENAI_API_KEY"), *modelName); err != nil {
			fmt.Fprintf(stderr, "repl: %v\n", err)
			return errUsage
		}
	} else if *modelName != "" {
		fmt.Fprintln(stderr, "repl: --model needs --openai-base-url (without it the REPL echoes)")
		return errUsage
	}
	if !*noSpool && *spoolDir != "" {
		r.spoolDir = *spoolDir
		if *spoolDir != defSpool {
			r.spoolFlag = *spoolDir
		}
	}
	var in lineReader
	if f, ok := stdin.(*os.File); ok && isTerminal(stdin) {
		e, err := newEditReader(f, stdout, stderr, *history)
		if err != nil {
			return err
		}
		in, stdout, stderr = e, e.Stdout(), e.Stderr()
	} else {
		in = newPlainReader(stdin)
	}
	defer in.Close()
	r.out, r.errOut = &lockedWriter{w: stdout}, &lockedWriter{w: stderr}
	r.hopts = append(r.hopts, client.WithErrorHandler(func(err error) {
		fmt.Fprintf(r.errOut, "auto-save: %s (the turns stay here and are retried)\n", r.describe(err, ""))
	}))
	if *autosave > 0 {
		r.hopts = append(r.hopts, client.WithAutoSave(*autosave))
	}
	if r.spoolDir != "" {
		r.hopts = append(r.hopts, client.WithSpool(r.spoolDir))
	}

	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	c, err := client.Dial(dctx, *addr, append(dopts, client.WithNamespace(*ns))...)
	cancel()
	if err != nil {
		if errors.Is(err, client.ErrUnavailable) {
			return fmt.Errorf("is sessiond running at %s? It does not answer", *addr)
		}
		return errors.New(r.describe(err, ""))
	}
	defer c.Close()
	r.c = c

	if err := r.open(ctx, *session); err != nil {
		return err
	}
	r.greet()
	return r.loop(ctx, in)
}

// open opens the session the user named (or a new one). A damaged spool
// file is reported and set aside by the SDK; opening again then works.
func (r *repl) open(ctx context.Context, session string) error {
	var err error
	for range 2 {
		switch ref := client.ParseRef(session); {
		case session == "":
			r.h, err = r.c.New(ctx, r.hopts...)
		case ref.ID() != "":
			r.h, err = r.c.Open(ctx, ref, r.hopts...)
		default:
			r.h, err = r.c.OpenOrCreate(ctx, ref, r.hopts...)
		}
		if !errors.Is(err, client.ErrSpool) {
			break
		}
		fmt.Fprintf(r.errOut, "warning: %s\n", r.describe(err, session))
	}
	if err != nil {
		return errors.New(r.describe(err, session))
	}
	return nil
}

// describe says what went wrong in words a REPL user reads, without the
// SDK's and gRPC's layers. subject names the session the user asked for,
// for "session X not found".
func (r *repl) describe(err error, subject string) string {
	if subject == "" && r.h != nil {
		subject = r.h.ID()
	}
	switch {
	case errors.Is(err, client.ErrNotFound):
		if subject == "" {
			return "session not found"
		}
		return fmt.Sprintf("session %s not found", subject)
	case errors.Is(err, client.ErrUnavailable):
		return fmt.Sprintf("sessiond at %s is not answering", r.addr)
	case errors.Is(err, client.ErrConflict):
		return "another program changed this session; /load it to see its current state (your unsaved turns are kept)"
	case errors.Is(err, client.ErrSpool):
		// "client: open ID: spool: spool file F: damaged: ...; kept as F.damaged"
		if _, after, ok := strings.Cut(err.Error(), client.ErrSpool.Error()+": "); ok {
			return after
		}
		return err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("sessiond at %s did not answer in time", r.addr)
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case describeAuth(err, r.ns) != "":
		return describeAuth(err, r.ns)
	}
	// The daemon's own message names the field or limit at fault.
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) && se.GRPCStatus().Code() != codes.Unknown {
		return se.GRPCStatus().Message()
	}
	return err.Error()
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
	switch msgs[len(msgs)-1].GetState() {
	case sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED:
		fmt.Fprintln(r.out, "(the last answer was interrupted: its writer stopped before the end; the session keeps what it had)")
	case sessiondv1.MessageState_MESSAGE_STATE_STREAMING:
		fmt.Fprintln(r.out, "(the last answer is still being written, or its writer stopped and sessiond will close it as interrupted)")
	}
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

// loop reads lines until /quit, EOF, Ctrl-C at the prompt, an interrupt
// or the end of ctx, then saves.
func (r *repl) loop(ctx context.Context, in lineReader) error {
	type read struct {
		line string
		err  error
	}
	// The reader goroutine reads one line each time it is asked, so that
	// the prompt appears only when the previous line is done. It may
	// outlive run when ctx ends while it waits for input; the process exits
	// right after, in main.
	want, got := make(chan struct{}), make(chan read, 1)
	go func() {
		for range want {
			line, err := in.ReadLine()
			got <- read{line, err}
		}
	}()
	defer close(want)
	for {
		want <- struct{}{}
		select {
		case <-ctx.Done():
			fmt.Fprintln(r.out)
			return r.quit(ctx)
		case <-r.interrupts:
			fmt.Fprintln(r.out)
			return r.quit(ctx)
		case rd := <-got:
			if rd.err != nil {
				if !errors.Is(rd.err, io.EOF) && !errors.Is(rd.err, errInterrupted) {
					fmt.Fprintf(r.errOut, "reading input: %v\n", rd.err)
				}
				return r.quit(ctx)
			}
			cctx, stop := r.interruptible(ctx)
			done, err := r.handle(cctx, strings.TrimSpace(rd.line))
			interrupted := stop()
			if err != nil {
				fmt.Fprintf(r.errOut, "error: %s\n", r.describe(err, ""))
			}
			// An interrupt that cut the line's work short ends only that
			// work; one that came after the work was done is a Ctrl-C at
			// the prompt, and quits.
			if done || interrupted && err == nil {
				if interrupted && !done {
					fmt.Fprintln(r.out)
				}
				return r.quit(ctx)
			}
		}
	}
}

// interruptible returns a ctx that an interrupt cancels, and a stop that
// releases it and reports whether it took an interrupt. The interrupt may
// have come just after the work ended, so a caller must not lose it: it is
// the user's Ctrl-C all the same.
func (r *repl) interruptible(ctx context.Context) (context.Context, func() (interrupted bool)) {
	ctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	took := make(chan bool, 1)
	go func() {
		select {
		case <-r.interrupts:
			cancel()
			took <- true
		case <-finished:
			took <- false
		case <-ctx.Done():
			took <- false
		}
	}()
	return ctx, func() bool { close(finished); cancel(); return <-took }
}

// handle runs one line; done means quit.
func (r *repl) handle(ctx context.Context, line string) (done bool, err error) {
	if line == "" {
		return false, nil
	}
	if !strings.HasPrefix(line, "/") {
		return false, r.chat(ctx, line)
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
			fmt.Fprintf(r.errOut, "closing %s: %s\n", old.ID(), r.describe(err, old.ID()))
		}
		fmt.Fprintf(r.out, "forked %s into %s; now in %s\n", old.ID(), f.ID(), f.ID())
	case "/undo":
		return false, r.undo(ctx)
	default:
		return false, fmt.Errorf("unknown command %s; /help lists them", cmd)
	}
	return false, nil
}

// chat answers the user's line, with the model when there is one (its
// answer streamed to the terminal), and appends the turn.
func (r *repl) chat(ctx context.Context, text string) error {
	user := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: text}
	if r.model == nil {
		reply := assistant(text)
		if err := r.h.Append(user, &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: reply,
			Metadata: map[string]string{"model": "echo"}}); err != nil {
			return err
		}
		fmt.Fprintf(r.out, "assistant: %s\n", reply)
		return nil
	}
	if err := r.finishLeftOpen(); err != nil {
		// Until it is finished, the session takes no new message.
		return fmt.Errorf("%w; send the line again once it answers", err)
	}
	live := &liveAnswer{base: context.WithoutCancel(ctx), h: r.h, user: user, model: r.model.model,
		shown: &prefixWriter{w: r.out, prefix: "assistant: "}}
	rep, err := r.model.stream(ctx, append(r.h.Messages(), user), live)
	if live.shown.started {
		fmt.Fprintln(r.out)
	}
	if !live.saved && err != nil && (rep == nil || rep.content == "") {
		// Nothing was answered: the line is not kept, and can be sent again.
		return err
	}
	// Once the answer began, the line is kept, and an answer cut short by
	// Ctrl-C or by the model is kept as far as it came.
	if ferr := live.finish(rep); ferr != nil {
		if live.turn != nil && !live.done {
			r.unfinished = live
		}
		return ferr
	}
	return err
}

// prefixWriter writes prefix before the first bytes, so that an answer
// that never comes leaves no empty "assistant:" line.
type prefixWriter struct {
	w       io.Writer
	prefix  string
	started bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if !p.started && len(b) > 0 {
		p.started = true
		if _, err := io.WriteString(p.w, p.prefix); err != nil {
			return 0, err
		}
	}
	return p.w.Write(b)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d%s\n", s.ID, cmp.Or(s.Alias, "-"), s.UpdatedAt.Local().Format(time.DateTime), s.MessageCount, cur)
	}
	return tw.Flush()
}

// load saves the current session, then switches to another; on failure the
// current one stays.
func (r *repl) load(ctx context.Context, target string) error {
	if err := r.h.Save(ctx); err != nil {
		return fmt.Errorf("saving %s first: %s", r.h.ID(), r.describe(err, ""))
	}
	next, err := r.c.Open(ctx, client.ParseRef(target), r.hopts...)
	if err != nil {
		return errors.New(r.describe(err, target))
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

// quit saves the session and prints how to resume it. When the daemon does
// not answer, it says so at once and retries for exitSaveTimeout, which an
// interrupt (Ctrl-C) cuts short. Turns it could not save stay in the spool
// (the next start of the REPL on this session sends them) or, without a
// spool, are printed so that nothing is lost.
func (r *repl) quit(ctx context.Context) error {
	base := context.WithoutCancel(ctx)
	if err := r.finishLeftOpen(); err != nil {
		// Left open, the answer is closed as interrupted by the daemon.
		fmt.Fprintf(r.errOut, "%s\n", err)
	}
	if r.h.Dirty() {
		fctx, cancel := context.WithTimeout(base, firstSaveTimeout)
		fctx, stop := r.interruptible(fctx)
		err := r.h.Save(fctx)
		stop()
		cancel()
		if err != nil {
			where := "in memory"
			if p := r.h.SpoolPath(); p != "" {
				where = "safe in the spool " + p
			}
			fmt.Fprintf(r.errOut, "%s; your %d unsaved messages are %s.\nsaving: retrying for up to %v (Ctrl-C stops waiting)...\n",
				r.describe(err, ""), r.h.Unsaved(), where, exitSaveTimeout)
		}
	}
	cctx, cancel := context.WithTimeout(base, exitSaveTimeout)
	defer cancel()
	cctx, stop := r.interruptible(cctx)
	err := r.h.Close(cctx)
	stop()
	if err != nil {
		if errors.Is(err, context.Canceled) {
			fmt.Fprintln(r.errOut, "\nstopped waiting.") // after the terminal's ^C
		}
		n := r.h.Unsaved()
		if p := r.h.SpoolPath(); p != "" {
			fmt.Fprintf(r.errOut, "session %s not saved: %s.\n%d unsaved messages are kept in %s and sent when you resume:\n  %s\n",
				r.h.ID(), r.describe(err, ""), n, p, r.resumeCommand())
			return errReported
		}
		fmt.Fprintf(r.errOut, "session %s not saved: %s.\nunsaved turns:\n", r.h.ID(), r.describe(err, ""))
		msgs := r.h.Messages()
		printMessages(r.errOut, msgs[len(msgs)-n:])
		return errReported
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

// resumeCommand is the exact command line that reopens this session: by
// its alias when it has one, else by id, with the namespace and a
// non-default spool folder.
func (r *repl) resumeCommand() string {
	name := cmp.Or(r.h.Alias(), r.h.ID())
	cmd := fmt.Sprintf("repl --addr %s --session %s", r.addr, shellQuote(name))
	if r.ns != "" {
		cmd += " --namespace " + shellQuote(r.ns)
	}
	if r.spoolFlag != "" {
		cmd += " --spool-dir " + shellQuote(r.spoolFlag)
	}
	if r.model != nil {
		cmd += " --openai-base-url " + shellQuote(strings.TrimSuffix(r.model.endpoint, "/chat/completions")) + " --model " + shellQuote(r.model.model)
	}
	return cmd + r.resumeTLS
}

// shellQuote quotes s for a POSIX shell when it holds anything but letters,
// digits and -_./:@.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:@", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
