package integration

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/testcerts"
)

// TestConnectionLimitAnswer: with --max-connections 1 and that connection
// held, a grpc-go client's call on a new connection fails at once with
// UNAVAILABLE naming the limit, not a reset connection, over plaintext and
// over TLS; the daemon serves new connections again once the first one
// closes. An HTTP client over the HTTP listener's limit gets 503 with the
// same message.
func TestConnectionLimitAnswer(t *testing.T) {
	t.Run("http", func(t *testing.T) {
		d := startDaemon(t, t.TempDir(), "--max-connections", "1", "--http-listen", "127.0.0.1:0")
		addr := httpAddr(t, d)
		held, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = held.Close() }()
		time.Sleep(100 * time.Millisecond) // accepted: it holds the place
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/v1/sessions")
		if err != nil {
			t.Fatalf("GET over the limit: %v; want a 503 answer", err)
		}
		defer func() { _ = resp.Body.Close() }()
		var body struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		const want = "sessiond: connection limit (--max-connections=1) reached"
		if resp.StatusCode != http.StatusServiceUnavailable || body.Code != int(codes.Unavailable) || body.Message != want {
			t.Fatalf("GET over the limit: %d %+v; want 503 {code: 14, message: %q}", resp.StatusCode, body, want)
		}
	})
	t.Run("plaintext", func(t *testing.T) {
		d := startDaemon(t, t.TempDir(), "--max-connections", "1")
		testConnectionLimit(t, func() *grpc.ClientConn {
			cc, err := grpc.NewClient(d.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cc.Close() })
			return cc
		})
	})
	t.Run("tls", func(t *testing.T) {
		dir := t.TempDir()
		ca := testcerts.NewCA(t, dir, "ca")
		certFile, keyFile, _ := ca.Issue(t, dir, "server", false)
		d := startDaemon(t, filepath.Join(dir, "data"), "--max-connections", "1", "--tls-cert", certFile, "--tls-key", keyFile)
		testConnectionLimit(t, func() *grpc.ClientConn { return tlsConn(t, d.Addr, ca.PEMFile, "", "") })
	})
}

func testConnectionLimit(t *testing.T, dial func() *grpc.ClientConn) {
	ctx := testContext(t, time.Minute)
	first := dial()
	if _, err := sessiondv1.NewSessionStoreServiceClient(first).CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "held"}); err != nil {
		t.Fatal(err)
	}
	get := func() error {
		_, err := sessiondv1.NewSessionStoreServiceClient(dial()).GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byAlias("", "held")})
		return err
	}

	const want = "sessiond: connection limit (--max-connections=1) reached"
	for i := range 3 { // each call dials again: every refusal is answered
		start := time.Now()
		err := get()
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), want) {
			t.Fatalf("call %d over the limit: %v; want UNAVAILABLE with %q", i, err, want)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("call %d over the limit took %v to fail; want it answered at once", i, took)
		}
	}

	_ = first.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := get()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the held connection closed, a new one still fails: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
