// Command repl is sessiond's reference chat REPL: a small conversation loop
// whose every turn is kept by sessiond through the Go SDK. It talks to any
// OpenAI-compatible chat completions endpoint (OpenAI, a llama.cpp or vLLM
// server, Ollama); without one, a stand-in assistant echoes, so that it
// runs anywhere.
//
// Usage:
//
//	repl [--addr 127.0.0.1:7437] [--session ID|ALIAS] [--namespace NS] [--autosave 5m]
//	     [--openai-base-url URL --model NAME]
//
//	     [--spool-dir DIR | --no-spool] [--history-file FILE]
//	     [--token SECRET] [--tls | --tls-ca FILE] [--tls-cert FILE --tls-key FILE]
//
// For a daemon with --auth-tokens, --token (or SESSIOND_TOKEN) is sent with
// every call; --tls-ca (or --tls, trusting the system's CAs) connects with
// TLS, and --tls-cert and --tls-key present a client certificate for mutual
// TLS. The resume command repeats the TLS flags, never the token.
//
// With --openai-base-url (such as https://api.openai.com/v1, or
// http://127.0.0.1:11434/v1 for Ollama) each line is sent with the
// conversation so far to URL/chat/completions as --model, with
// $OPENAI_API_KEY as the bearer token when set. The answer streams to the
// terminal (server-sent events) and is stored with the model and token
// usage the endpoint reports (stream_options.include_usage), and its
// reasoning text when the server streams one. The model is offered no
// tools. A request that fails stores nothing; Ctrl-C during an answer
// stops it, and what was shown is kept, marked finish_reason
// "interrupted".
//
// Type a line to chat. Commands: /sessions, /save, /load ID|ALIAS, /reset,
// /fork, /undo, /help, /quit. /quit, Ctrl-D and Ctrl-C on an empty line save
// the session and print the command that resumes it (by alias when the
// session has one).
//
// On a terminal, lines are edited with chzyer/readline: arrow keys, Ctrl-A
// and Ctrl-E, Up/Down and Ctrl-R through a history kept in --history-file
// ($XDG_STATE_HOME/sessiond/repl_history, else
// ~/.local/state/sessiond/repl_history). When stdin is not a terminal, repl
// reads plain lines without prompts, so it can be scripted.
//
// Unsaved turns are kept in a spool folder (--spool-dir, by default
// $XDG_STATE_HOME/sessiond/spool, else ~/.local/state/sessiond/spool) until
// sessiond has them, so quitting or crashing while the daemon is down loses
// nothing: the next repl on that session sends them first. On quit with the
// daemon down, repl says so at once and retries for up to 30 s; Ctrl-C stops
// waiting.
//
// Exit codes: 0 saved, 1 an error (or a session not saved, its turns
// spooled), 2 usage.
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
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	err := run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, sigs)
	signal.Stop(sigs)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.Is(err, errUsage):
		os.Exit(2)
	case errors.Is(err, errReported):
		os.Exit(1)
	default:
		fmt.Fprintln(os.Stderr, "repl:", err)
		os.Exit(1)
	}
}
