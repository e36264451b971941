// Command repl is sessiond's reference chat REPL: a small conversation loop
// whose every turn is kept by sessiond through the Go SDK, with a stand-in
// assistant (it echoes) instead of a model, so that it runs anywhere.
//
// Usage:
//
//	repl [--addr 127.0.0.1:7437] [--session ID|ALIAS] [--namespace NS] [--autosave 5m]
//
// Type a line to chat. Commands: /sessions, /save, /load ID|ALIAS, /reset,
// /fork, /undo, /help, /quit. /quit, Ctrl-D and Ctrl-C save the session and
// print the command that resumes it. When stdin is not a terminal, repl reads
// plain lines without prompts, so it can be scripted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "repl:", err)
		os.Exit(1)
	}
}
