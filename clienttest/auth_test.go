package clienttest_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
	"github.com/sessiond/sessiond/internal/auth"
)

// Against a real daemon with --auth-tokens: WithToken and SESSIOND_TOKEN
// authenticate, errors map to ErrUnauthenticated and ErrPermissionDenied.
func TestTokens(t *testing.T) {
	bin := needDaemon(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.json")
	secret, err := auth.AddToken(file, "agent", []string{"mine"}, auth.RoleWrite)
	if err != nil {
		t.Fatal(err)
	}
	d := clienttest.StartDaemon(t, bin, filepath.Join(dir, "data"), "127.0.0.1:0", clienttest.WithArgs("--auth-tokens", file))
	ctx := t.Context()

	t.Setenv(client.TokenEnv, "")
	anon, err := client.Dial(ctx, d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.ServerInfo(ctx); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("no token: %v; want ErrUnauthenticated", err)
	}

	t.Setenv(client.TokenEnv, secret)
	fromEnv, err := client.Dial(ctx, d.Addr, client.WithNamespace("mine"))
	if err != nil {
		t.Fatal(err)
	}
	defer fromEnv.Close()
	if _, err := fromEnv.Create(ctx, client.CreateOptions{Title: "t"}); err != nil {
		t.Fatalf("token from %s: %v", client.TokenEnv, err)
	}
	if _, err := fromEnv.In("theirs").Create(ctx, client.CreateOptions{Title: "t"}); !errors.Is(err, client.ErrPermissionDenied) {
		t.Fatalf("other namespace: %v; want ErrPermissionDenied", err)
	}

	// WithToken wins over the environment.
	wrong, err := client.Dial(ctx, d.Addr, client.WithToken("sessiond_wrong"))
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if _, err := wrong.ServerInfo(ctx); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("WithToken(wrong) with a good SESSIOND_TOKEN: %v; want ErrUnauthenticated", err)
	}
}

func TestTokenNeverInClearTextOffHost(t *testing.T) {
	ctx := t.Context()
	t.Setenv(client.TokenEnv, "")
	for _, addr := range []string{"10.1.2.3:7437", "sessiond.example:7437", "dns:///sessiond.example:7437"} {
		if _, err := client.Dial(ctx, addr, client.WithToken("s"), client.WithLazyConnect()); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("token without TLS to %s: %v; want ErrInvalid", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:7437", "[::1]:7437", "localhost:7437", "unix:///run/s.sock"} {
		c, err := client.Dial(ctx, addr, client.WithToken("s"), client.WithLazyConnect())
		if err != nil {
			t.Errorf("token without TLS to %s: %v", addr, err)
			continue
		}
		_ = c.Close()
	}
	// With TLS any host is fine; a CA file that does not exist is not.
	c, err := client.Dial(ctx, "10.1.2.3:7437", client.WithToken("s"), client.WithTLS(nil), client.WithLazyConnect())
	if err != nil {
		t.Fatalf("token over TLS: %v", err)
	}
	_ = c.Close()
	if _, err := client.Dial(ctx, "10.1.2.3:7437", client.WithTLSFiles(filepath.Join(t.TempDir(), "none.pem"), "", ""), client.WithLazyConnect()); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("missing CA file: %v; want ErrInvalid", err)
	}
	if _, err := client.GRPCDialOptions("10.1.2.3:7437", "s", nil); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("GRPCDialOptions with a token, no TLS, off host: %v; want ErrInvalid", err)
	}
	if opts, err := client.GRPCDialOptions("127.0.0.1:7437", "s", nil); err != nil || len(opts) != 2 {
		t.Fatalf("GRPCDialOptions with a token on loopback: %d options, %v", len(opts), err)
	}
	if _, err := client.TLSConfig("", "cert.pem", ""); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("certificate without key: %v; want ErrInvalid", err)
	}
}

// WithTLSFiles against a real daemon under mutual TLS: the CA file and a
// client certificate get in; without the client certificate, no.
func TestTLSFiles(t *testing.T) {
	bin := needDaemon(t)
	t.Setenv(client.TokenEnv, "")
	d := clienttest.StartSecureDaemon(t, bin, t.TempDir(), "")
	ctx := t.Context()

	c, err := client.Dial(ctx, d.Addr, client.WithTLSFiles(d.CAFile, d.CertFile, d.KeyFile), client.WithToken(d.Token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ServerInfo(ctx); err != nil {
		t.Fatalf("mutual TLS with WithTLSFiles: %v", err)
	}
	noCert, err := client.Dial(ctx, d.Addr, client.WithTLSFiles(d.CAFile, "", ""), client.WithLazyConnect())
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	if _, err := noCert.ServerInfo(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("without a client certificate: %v; want ErrUnavailable", err)
	}
}
