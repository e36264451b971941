package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecurityFlags(t *testing.T) {
	home := env(map[string]string{"HOME": "/home/u"})
	c, err := parseConfig([]string{"--auth-tokens", "/t.json", "--tls-cert", "/c.pem", "--tls-key", "/k.pem", "--tls-client-ca", "/ca.pem"}, home, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.security != (securityConfig{authTokens: "/t.json", tlsCert: "/c.pem", tlsKey: "/k.pem", tlsClientCA: "/ca.pem"}) {
		t.Fatalf("security config %+v", c.security)
	}
	c, err = parseConfig(nil, env(map[string]string{"HOME": "/h", "SESSIOND_AUTH_TOKENS": "/e.json", "SESSIOND_INSECURE": "true"}), &bytes.Buffer{})
	if err != nil || c.security.authTokens != "/e.json" || !c.security.insecure {
		t.Fatalf("from environment: %+v, %v", c, err)
	}
	for _, tt := range []struct {
		args   []string
		msgHas string
	}{
		{[]string{"--tls-cert", "/c.pem"}, "--tls-key"},
		{[]string{"--tls-key", "/k.pem"}, "--tls-cert"},
		{[]string{"--tls-client-ca", "/ca.pem"}, "needs TLS"},
	} {
		_, err := parseConfig(tt.args, home, &bytes.Buffer{})
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.msgHas) {
			t.Errorf("%v: %v; want a usage error naming %q", tt.args, err, tt.msgHas)
		}
	}
}

func TestExposure(t *testing.T) {
	secured := securityConfig{authTokens: "t", tlsCert: "c", tlsKey: "k"}
	for _, tt := range []struct {
		name     string
		cfg      securityConfig
		loopback bool
		refused  bool
		warnHas  string
	}{
		{"loopback without anything", securityConfig{}, true, false, ""},
		{"exposed without anything", securityConfig{}, false, true, ""},
		{"exposed with tokens only", securityConfig{authTokens: "t"}, false, true, ""},
		{"exposed with TLS only", securityConfig{tlsCert: "c", tlsKey: "k"}, false, true, ""},
		{"exposed with both", secured, false, false, ""},
		{"exposed, insecure", securityConfig{insecure: true}, false, false, "without TLS or tokens"},
		{"exposed, insecure, TLS only", securityConfig{tlsCert: "c", tlsKey: "k", insecure: true}, false, false, "without tokens"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			warn, err := tt.cfg.checkExposure("0.0.0.0:7437", tt.loopback)
			if tt.refused {
				var ue *usageError
				if !errors.As(err, &ue) {
					t.Fatalf("err = %v; want a usage error", err)
				}
				for _, fix := range []string{"--tls-cert", "--auth-tokens", "sessionctl token add", "127.0.0.1", "--insecure"} {
					if !strings.Contains(err.Error(), fix) {
						t.Errorf("refusal does not say %q: %v", fix, err)
					}
				}
				return
			}
			if err != nil || !strings.Contains(warn, tt.warnHas) || (tt.warnHas == "") != (warn == "") {
				t.Fatalf("warning %q, err %v; want a warning containing %q", warn, err, tt.warnHas)
			}
		})
	}
	for addr, want := range map[string]bool{
		"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "unix:/run/s.sock": true,
		"0.0.0.0:1": false, ":1": false, "10.1.2.3:1": false, "[::]:1": false,
	} {
		if got := listenLoopback(t.Context(), addr); got != want {
			t.Errorf("listenLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// The daemon refuses a non-loopback --listen without TLS and tokens before
// it binds the address or opens the store, and exits 2.
func TestRunRefusesExposedListen(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	var stderr bytes.Buffer
	err := run(t.Context(), []string{"--listen", "0.0.0.0:0", "--data-dir", dataDir}, &bytes.Buffer{}, &stderr)
	if code := exitCode(err, &stderr); code != 2 || !strings.Contains(stderr.String(), "--insecure") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused daemon created its data dir: %v", err)
	}
}

// A token file others may write is reported at start-up.
func TestTokenFileModeWarning(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(file, []byte(`{"tokens": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	sec, err := loadSecurity(&securityConfig{authTokens: file})
	if err != nil {
		t.Fatal(err)
	}
	if w := sec.warnings(); len(w) != 0 {
		t.Fatalf("mode 0600: %v", w)
	}
	if err := os.Chmod(file, 0o666); err != nil {
		t.Fatal(err)
	}
	if w := sec.warnings(); len(w) != 1 || !strings.Contains(w[0], "chmod 600") {
		t.Fatalf("mode 0666: %v", w)
	}
	if _, err := loadSecurity(&securityConfig{authTokens: filepath.Join(t.TempDir(), "missing.json")}); err == nil || !strings.Contains(err.Error(), "--auth-tokens") {
		t.Fatalf("missing token file: %v", err)
	}
}
