package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/clienttest"
	"github.com/sessiond/sessiond/internal/auth"
)

func TestTokenCommands(t *testing.T) {
	t.Setenv("SESSIOND_AUTH_TOKENS", "")
	file := filepath.Join(t.TempDir(), "tokens.json")
	r := must(t, ctlIn(t, strings.NewReader(""), "token", "add", "--file", file, "--name", "agent-a", "--namespace", "team-a", "--namespace", "", "--role", "write"))
	// The secret alone on one line: at least 128 random bits.
	if !regexp.MustCompile(`^sessiond_[A-Za-z0-9_-]{43}\n$`).MatchString(r.stdout) {
		t.Fatalf("token add printed %q; want the secret alone on one line", r.stdout)
	}
	secret := strings.TrimSpace(r.stdout)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), secret) {
		t.Fatal("the token file holds the secret")
	}
	set, err := auth.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	tok, ok := set.Lookup(secret)
	if !ok || tok.Name != "agent-a" || tok.Role != auth.RoleWrite || !tok.Allows("") || !tok.Allows("team-a") || tok.Allows("team-b") {
		t.Fatalf("stored token %+v, %v", tok, ok)
	}

	t.Setenv("SESSIOND_AUTH_TOKENS", file) // --file from the environment
	must(t, ctlIn(t, strings.NewReader(""), "token", "add", "--name", "ops", "--namespace", "*", "--role", "admin"))
	ls := must(t, ctlIn(t, strings.NewReader(""), "token", "ls"))
	for _, want := range []string{"NAME", "agent-a", "write", `team-a,""`, "ops", "admin", "*"} {
		if !strings.Contains(ls.stdout, want) {
			t.Errorf("token ls lacks %q:\n%s", want, ls.stdout)
		}
	}
	lsJSON := must(t, ctlIn(t, strings.NewReader(""), "--json", "token", "ls"))
	lines := strings.Split(strings.TrimSpace(lsJSON.stdout), "\n")
	var first map[string]any
	if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &first) != nil || first["name"] != "agent-a" || first["role"] != "write" {
		t.Fatalf("token ls --json:\n%s", lsJSON.stdout)
	}

	must(t, ctlIn(t, strings.NewReader(""), "token", "rm", "--name", "agent-a"))
	if r := ctlIn(t, strings.NewReader(""), "token", "rm", "--name", "agent-a"); r.code != exitNotFound {
		t.Fatalf("second rm: %v; want exit 3", r)
	}
	if set, _ := auth.ReadFile(file); set.Len() != 1 {
		t.Fatalf("after rm: %d tokens", set.Len())
	}

	for _, args := range [][]string{
		{"token", "add", "--name", "x", "--namespace", "a"},                        // no role
		{"token", "add", "--name", "x", "--role", "read"},                          // no namespace
		{"token", "add", "--name", "x y", "--namespace", "a", "--role", "read"},    // bad name
		{"token", "add", "--name", "x", "--namespace", "a/b", "--role", "read"},    // bad namespace
		{"token", "add", "--name", "x", "--namespace", "a", "--role", "superuser"}, // bad role
		{"token", "add", "--name", "ops", "--namespace", "a", "--role", "read"},    // taken
		{"token", "ls", "--file", ""},                                              // no file
		{"token"},                                                                  // no subcommand
	} {
		r := ctlIn(t, strings.NewReader(""), args...)
		if r.code == 0 || r.stdout != "" {
			t.Errorf("%v: %v; want a failure and nothing on stdout", args, r)
		}
	}
}

// sessionctl against a daemon with TLS, mutual TLS and tokens.
func TestTokenAndTLSFlags(t *testing.T) {
	t.Setenv("SESSIOND_TOKEN", "")
	d := clienttest.StartSecureDaemon(t, sessiondBin, t.TempDir(), "*")
	secret := d.Token
	ctl := func(args ...string) result {
		return ctlIn(t, strings.NewReader(""), append([]string{"--addr", d.Addr, "--timeout", "5s"}, args...)...)
	}
	tlsArgs := d.TLSArgs()

	must(t, ctl(append(tlsArgs, "--token", secret, "version")...))
	t.Setenv("SESSIOND_TOKEN", secret)
	must(t, ctl(append(tlsArgs, "ls")...))
	t.Setenv("SESSIOND_TOKEN", "")
	if r := ctl(append(tlsArgs, "ls")...); r.code != exitError || !strings.Contains(r.stderr, "--token") {
		t.Errorf("no token: %v; want exit 1 naming --token", r)
	}
	if r := ctl("--token", secret, "--tls-ca", d.CAFile, "ls"); r.code != exitError {
		t.Errorf("no client certificate under mutual TLS: %v; want exit 1", r)
	}
	// A plaintext client is told the daemon serves TLS, not that it is down.
	if r := ctl("--token", secret, "ls"); r.code != exitError || !strings.Contains(r.stderr, "it serves TLS: add --tls-ca FILE") || strings.Contains(r.stderr, "start it") {
		t.Errorf("plaintext to a TLS daemon: %v; want exit 1 naming --tls-ca", r)
	}
	// A read token refused a write is told its role, not to change namespace.
	readSecret, err := auth.AddToken(d.TokenFile, "reader", []string{"*"}, auth.RoleRead)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the daemon to load the read token", func() bool {
		return ctl(append(tlsArgs, "--token", readSecret, "ls")...).code == 0
	})
	r := ctl(append(tlsArgs, "--token", readSecret, "create", "--alias", "x")...)
	if r.code != exitError || !strings.Contains(r.stderr, `has role read`) || !strings.Contains(r.stderr, "--role write") || strings.Contains(r.stderr, "--namespace") {
		t.Errorf("read token refused a create: %v; want exit 1 naming the role", r)
	}
	if r := ctl("--tls-ca", d.CAFile, "--tls-cert", d.CertFile, "ls"); r.code != exitUsage {
		t.Errorf("--tls-cert without --tls-key: %v; want exit 2", r)
	}
	// A token is never sent in clear text off this machine.
	if r := ctlIn(t, strings.NewReader(""), "--addr", "10.1.2.3:7437", "--token", secret, "ls"); r.code != exitUsage || !strings.Contains(r.stderr, "TLS") {
		t.Errorf("token without TLS to another host: %v; want exit 2 naming TLS", r)
	}
}

// TestTokenAddMakesFolder: token add --file in a folder that does not exist
// yet makes it (0700); where it may not, it says what to do, naming no
// temporary file.
func TestTokenAddMakesFolder(t *testing.T) {
	t.Setenv("SESSIOND_AUTH_TOKENS", "")
	dir := filepath.Join(t.TempDir(), "etc", "sessiond")
	file := filepath.Join(dir, "tokens.json")
	must(t, ctlIn(t, strings.NewReader(""), "token", "add", "--file", file, "--name", "a", "--namespace", "", "--role", "read"))
	st, err := os.Stat(dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("folder %s: %v, %v; want it made 0700", dir, st, err)
	}
	if os.Geteuid() == 0 {
		t.Skip("root may write anywhere")
	}
	locked := filepath.Join(t.TempDir(), "locked")
	if err := os.Mkdir(locked, 0o500); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{filepath.Join(locked, "tokens.json"), filepath.Join(locked, "sub", "tokens.json")} {
		r := ctlIn(t, strings.NewReader(""), "token", "add", "--file", f, "--name", "a", "--namespace", "", "--role", "read")
		if r.code != exitError || !strings.Contains(r.stderr, "permission denied") || !strings.Contains(r.stderr, "--file in a folder of yours") || strings.Contains(r.stderr, ".tmp") {
			t.Errorf("token add --file %s: %v", f, r)
		}
		checkOneLineError(t, r)
	}
}
