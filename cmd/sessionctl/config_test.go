package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// writeConfig writes the config file under a fresh XDG_CONFIG_HOME and
// returns its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", home)
	path := filepath.Join(home, "sessiond", "config.toml")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeConfigAt(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestContexts: the config file's contexts pick the daemon, namespace,
// token and TLS files; flags and environment win over them.
func TestContexts(t *testing.T) {
	t.Setenv("SESSIOND_ADDR", "")
	t.Setenv("SESSIOND_NAMESPACE", "")
	t.Setenv("SESSIOND_TOKEN", "")
	plain := startDaemon(t, t.TempDir(), "")
	plain.create(&sessiondv1.CreateSessionRequest{Alias: "in-default"})
	plain.create(&sessiondv1.CreateSessionRequest{Namespace: "team", Alias: "in-team"})
	secure := clienttest.StartSecureDaemon(t, sessiondBin, t.TempDir(), "*")
	tokenFile := filepath.Join(filepath.Dir(secure.CAFile), "secure.token")
	if err := os.WriteFile(tokenFile, []byte(secure.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, `# my daemons
current-context = "local"

[contexts.local]
address = "`+plain.addr+`"
namespace = "team"

[contexts.secure]
address = "`+secure.Addr+`"
token-file = "`+tokenFile+`"
tls-ca = "`+secure.CAFile+`"
tls-cert = "`+secure.CertFile+`"
tls-key = "`+secure.KeyFile+`"
`)
	ctl := func(args ...string) result { return ctlIn(t, strings.NewReader(""), args...) }

	// current-context: the plain daemon, namespace team.
	r := must(t, ctl("ls"))
	if !strings.Contains(r.stdout, "in-team") || strings.Contains(r.stdout, "in-default") {
		t.Errorf("ls with current-context local:\n%s", r.stdout)
	}
	// A flag and the environment win over the context.
	if r := must(t, ctl("ls", "--namespace", "")); !strings.Contains(r.stdout, "in-default") {
		t.Errorf("--namespace '' over the context:\n%s", r.stdout)
	}
	t.Setenv("SESSIOND_ADDR", "127.0.0.1:1")
	if r := ctl("--timeout", "2s", "ls"); r.code != exitError || !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Errorf("SESSIOND_ADDR over the context: %v", r)
	}
	t.Setenv("SESSIOND_ADDR", "")

	// --context secure: TLS, the client certificate and the token file.
	must(t, ctl("--context", "secure", "create", "--alias", "over-tls"))
	if r := must(t, ctl("--context", "secure", "ls")); !strings.Contains(r.stdout, "over-tls") {
		t.Errorf("ls --context secure:\n%s", r.stdout)
	}
	t.Setenv(configEnv, "secure")
	must(t, ctl("show", "over-tls"))
	t.Setenv(configEnv, "")
	// --token on the command line wins over the token file.
	if r := ctl("--context", "secure", "--token", "wrong", "ls"); r.code != exitError || !strings.Contains(r.stderr, "--token") {
		t.Errorf("--token over the context's token file: %v", r)
	}

	// config view lists both, the current one marked; config use switches.
	r = must(t, ctl("config", "view"))
	if !regexp.MustCompile(`(?m)^\*\s+local\s`).MatchString(r.stdout) {
		t.Errorf("config view does not mark local:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, secure.Addr) || !strings.Contains(r.stdout, tokenFile) {
		t.Errorf("config view:\n%s", r.stdout)
	}
	must(t, ctl("config", "use", "secure"))
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "# my daemons\ncurrent-context = \"secure\"\n") || strings.Count(string(data), "current-context") != 1 {
		t.Errorf("config use rewrote the file as:\n%s", data)
	}
	if r := must(t, ctl("ls")); !strings.Contains(r.stdout, "over-tls") {
		t.Errorf("ls after config use secure:\n%s", r.stdout)
	}
	r = must(t, ctl("--json", "config", "view"))
	var first map[string]any
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &first) != nil ||
		first["name"] != "secure" || first["current"] != true || first["tls"] != true {
		t.Errorf("config view --json:\n%s", r.stdout)
	}

	// An unreachable context's daemon is blamed on the context.
	writeConfigAt(t, path, "[contexts.gone]\naddress = \"127.0.0.1:1\"\n")
	if r := ctl("--context", "gone", "--timeout", "2s", "ls"); r.code != exitError || !strings.Contains(r.stderr, "context gone") || !strings.Contains(r.stderr, "config view") {
		t.Errorf("unreachable context: %v", r)
	}
	writeConfigAt(t, path, string(data))

	// Mistakes are usage errors that say what to do.
	if r := ctl("--context", "nope", "ls"); r.code != exitUsage || !strings.Contains(r.stderr, "local, secure") {
		t.Errorf("--context nope: %v", r)
	}
	if r := ctl("config", "use", "nope"); r.code != exitNotFound || !strings.Contains(r.stderr, "local, secure") {
		t.Errorf("config use nope: %v", r)
	}
	writeConfig(t, "[contexts.x]\nadress = \"typo\"\n")
	if r := ctl("ls"); r.code != exitUsage || !strings.Contains(r.stderr, "adress") {
		t.Errorf("a misspelt setting: %v", r)
	}
	writeConfig(t, "current-context = \"gone\"\n[contexts.x]\n")
	if r := ctl("ls"); r.code != exitUsage || !strings.Contains(r.stderr, "config use") {
		t.Errorf("current-context naming no context: %v", r)
	}
	must(t, ctl("config", "use", "x")) // repairs it
	// No config file: the defaults, and --context is an error.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	if r := ctl("--addr", plain.addr, "ls"); r.code != 0 || !strings.Contains(r.stdout, "in-default") {
		t.Errorf("ls without a config file: %v", r)
	}
	if r := ctl("--context", "local", "ls"); r.code != exitUsage || !strings.Contains(r.stderr, "no contexts in") {
		t.Errorf("--context without a config file: %v", r)
	}
}
