package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
)

// The REPL against a daemon with mutual TLS and tokens: --token (or
// SESSIOND_TOKEN), --tls-ca, --tls-cert and --tls-key get it in; the resume
// command repeats the TLS flags but never the token; without a token the
// REPL says what to give.
func TestTokenAndTLS(t *testing.T) {
	needBinaries(t)
	t.Setenv(client.TokenEnv, "")
	d := clienttest.StartSecureDaemon(t, daemonBin, t.TempDir(), "chat")
	secret, tlsArgs := d.Token, d.TLSArgs()

	args := append([]string{"--addr", d.Addr, "--namespace", "chat", "--no-spool", "--token", secret}, tlsArgs...)
	out, _ := runREPL(t, args, "hello\n/quit\n")
	if strings.Contains(out, secret) {
		t.Fatal("the REPL printed the secret")
	}
	resume := resumeArgs(t, out)
	for _, f := range tlsArgs {
		if !slices.Contains(resume, f) {
			t.Errorf("resume command %q lacks %q", resume, f)
		}
	}
	t.Setenv(client.TokenEnv, secret) // the resume command relies on it
	out2, _ := runREPL(t, resume, "/quit\n")
	if !strings.Contains(out2, "resumed session") || !strings.Contains(out2, "echo: hello") {
		t.Fatalf("resume over TLS with SESSIOND_TOKEN:\n%s", out2)
	}

	t.Setenv(client.TokenEnv, "")
	var o, e bytes.Buffer
	err := run(t.Context(), append([]string{"--addr", d.Addr, "--namespace", "chat", "--no-spool"}, tlsArgs...), strings.NewReader("/quit\n"), &o, &e, nil)
	if err == nil || !strings.Contains(err.Error()+e.String(), "--token") {
		t.Fatalf("no token: %v\n%s", err, e.String())
	}
}
