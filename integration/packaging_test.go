package integration

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unitPath is the systemd unit docs/operations.md tells operators to install.
const unitPath = "packaging/sessiond.service"

// TestSystemdUnit checks packaging/sessiond.service with systemd's own
// checker: `systemd-analyze verify` (a misspelt directive or a bad value
// fails it: its warnings count as failures here) and `systemd-analyze
// security --offline` (the hardening keeps the exposure score low). The
// unit's ExecStart names /usr/local/bin/sessiond, which verify requires to
// exist; the copy checked names the binary built for this run instead and
// is otherwise byte for byte the unit. Its settings must be real sessiond
// flags, and the hardening directives an operator expects must be there.
func TestSystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	needTool(t, err, "Debian's systemd package (scripts/tools.sh does)")

	unit, err := os.ReadFile(filepath.Join(moduleRoot, unitPath))
	if err != nil {
		t.Fatal(err)
	}
	const installed = "ExecStart=/usr/local/bin/sessiond"
	if !bytes.Contains(unit, []byte(installed+"\n")) {
		t.Fatalf("%s lacks %q", unitPath, installed)
	}
	copyPath := filepath.Join(t.TempDir(), "sessiond.service")
	if err := os.WriteFile(copyPath, bytes.Replace(unit, []byte(installed), []byte("ExecStart="+sessiondBin), 1), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, args := range [][]string{
		{"verify", copyPath},
		// The overall exposure on systemd's 0-10 scale must stay at most 2.0
		// ("OK"); --threshold is in tenths.
		{"security", "--offline=yes", "--threshold=20", copyPath},
	} {
		cmd := exec.CommandContext(t.Context(), analyze, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil || (args[0] == "verify" && stderr.Len() > 0) {
			t.Fatalf("systemd-analyze %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
	}

	settings := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			settings[k] = append(settings[k], v)
		}
	}
	for k, want := range map[string]string{
		"DynamicUser": "yes", "StateDirectory": "sessiond", "ProtectSystem": "strict",
		"NoNewPrivileges": "yes", "PrivateTmp": "yes", "ProtectHome": "yes",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "MemoryDenyWriteExecute": "yes",
		"SystemCallFilter": "@system-service", "CapabilityBoundingSet": "",
		"RestartPreventExitStatus": "2",
	} {
		got := settings[k]
		if len(got) == 0 || got[0] != want {
			t.Errorf("%s: %s=%q, want %q", unitPath, k, got, want)
		}
	}

	// Every SESSIOND_* the unit sets is a flag's variable, and the data dir
	// is the StateDirectory.
	help, err := exec.CommandContext(t.Context(), sessiondBin, "--help").Output()
	if err != nil {
		t.Fatalf("sessiond --help: %v", err)
	}
	for _, env := range settings["Environment"] {
		name, value, _ := strings.Cut(env, "=")
		if !bytes.Contains(help, []byte("(env "+name+")")) {
			t.Errorf("%s sets %s, which is no sessiond flag's variable", unitPath, name)
		}
		if name == "SESSIOND_DATA_DIR" && value != "/var/lib/"+settings["StateDirectory"][0] {
			t.Errorf("%s: SESSIOND_DATA_DIR=%s is not the StateDirectory", unitPath, value)
		}
	}
}
