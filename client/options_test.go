package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sessiond/sessiond/client"
)

// bearer is per-call credentials that send a token and count their calls.
type bearer struct {
	token string
	calls atomic.Int64
}

func (b *bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	b.calls.Add(1)
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (*bearer) RequireTransportSecurity() bool { return false }

// tokenFile writes a daemon's --auth-tokens file, in its documented format,
// holding one write token for the default namespace, and returns its path.
func tokenFile(t *testing.T, secret string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(secret))
	b, err := json.Marshal(map[string]any{"tokens": []map[string]any{{
		"name": "sdk-test", "sha256": hex.EncodeToString(sum[:]), "namespaces": []string{""}, "role": "write",
	}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "tokens.json")
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// WithPerRPCCredentials sends the caller's credentials with every call, in
// place of SESSIOND_TOKEN's token.
func TestWithPerRPCCredentials(t *testing.T) {
	const secret = "sessiond_sdk-test-secret"
	t.Setenv(client.TokenEnv, "sessiond_unknown")
	addr, ctx, _ := runSessiond(t, "--auth-tokens", tokenFile(t, secret))

	// The daemon checks tokens: the environment's is refused.
	envOnly := dial(t, ctx, addr, client.WithLazyConnect())
	if _, err := envOnly.Create(ctx, client.CreateOptions{}); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("Create with SESSIOND_TOKEN's unknown token: %v; want ErrUnauthenticated", err)
	}

	creds := &bearer{token: secret}
	c := dial(t, ctx, addr, client.WithPerRPCCredentials(creds))
	sess, err := c.Create(ctx, client.CreateOptions{Title: "authorised"})
	if err != nil {
		t.Fatalf("Create with the credentials: %v", err)
	}
	if got, err := c.Get(ctx, client.ID(sess.ID)); err != nil || got.Title != "authorised" {
		t.Fatalf("Get with the credentials = %+v, %v", got, err)
	}
	if n := creds.calls.Load(); n != 2 {
		t.Errorf("the credentials gave metadata to %d calls, want 2", n)
	}
}

// WithGRPCDialOptions reaches grpc.NewClient, after the SDK's own options.
func TestWithGRPCDialOptions(t *testing.T) {
	addr, ctx, _ := runSessiond(t)
	var mu sync.Mutex
	var methods []string
	record := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		mu.Lock()
		methods = append(methods, path.Base(method))
		mu.Unlock()
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	c := dial(t, ctx, addr, client.WithGRPCDialOptions(record))
	sess, err := c.Create(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, client.ID(sess.ID)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if want := []string{"CreateSession", "GetSession"}; !slices.Equal(methods, want) {
		t.Errorf("the interceptor saw %v, want %v", methods, want)
	}
	mu.Unlock()

	// The daemon serves plaintext, so WithTLS alone cannot connect; the
	// plaintext credentials given after it win.
	if tlsOnly, err := client.Dial(ctx, addr, client.WithTLS(nil)); !errors.Is(err, client.ErrUnavailable) {
		if err == nil {
			tlsOnly.Close()
		}
		t.Fatalf("Dial with TLS to a plaintext daemon: %v; want ErrUnavailable", err)
	}
	plain := dial(t, ctx, addr, client.WithTLS(nil), client.WithGRPCDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if _, err := plain.Get(ctx, client.ID(sess.ID)); err != nil {
		t.Fatalf("Get with WithTLS overridden by plaintext credentials: %v", err)
	}
}

// logRecords is a slog.Handler that keeps every record.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }

func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

// find returns the first record with message msg.
func (l *logRecords) find(msg string) (slog.Record, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.Message == msg {
			return r, true
		}
	}
	return slog.Record{}, false
}

// WithLogger gets the SDK's log lines: here an auto-save that failed, with
// no error handler to take it.
func TestWithLogger(t *testing.T) {
	addr, ctx, _ := runSessiond(t)
	logs := &logRecords{}
	c := dial(t, ctx, addr, client.WithLogger(slog.New(logs)))
	h, err := c.New(ctx, client.WithAutoSave(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(client.UserText("one")); err != nil {
		t.Fatal(err)
	}
	if err := h.Save(ctx); err != nil {
		t.Fatal(err)
	}
	// Another writer moves the session on, so the handle's next save
	// conflicts.
	if _, err := c.Update(ctx, client.ID(h.ID()), client.SetSummary("elsewhere")); err != nil {
		t.Fatal(err)
	}
	if err := h.Append(client.UserText("two")); err != nil {
		t.Fatal(err)
	}
	const msg = "sessiond auto-save failed"
	rec, ok := logs.find(msg)
	for ; !ok && ctx.Err() == nil; rec, ok = logs.find(msg) {
		time.Sleep(10 * time.Millisecond)
	}
	if !ok {
		t.Fatalf("no %q record logged", msg)
	}
	attrs := map[string]any{}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.Any()
		return true
	})
	if rec.Level != slog.LevelWarn || attrs["session"] != h.ID() {
		t.Errorf("record %v %q %v; want WARN with session %s", rec.Level, rec.Message, attrs, h.ID())
	}
	if err, _ := attrs["err"].(error); !errors.Is(err, client.ErrConflict) {
		t.Errorf("logged err %v; want ErrConflict", attrs["err"])
	}
	if err := h.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// WithCloseTimeout bounds Close's retries when its ctx has no deadline; the
// handle stays open with what it could not save.
func TestWithCloseTimeout(t *testing.T) {
	addr, ctx, stop := runSessiond(t)
	c := dial(t, ctx, addr)
	h, err := c.New(ctx, client.WithCloseTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(client.UserText("unsaved")); err != nil {
		t.Fatal(err)
	}
	stop()
	start := time.Now()
	err = h.Close(t.Context())
	if elapsed := time.Since(start); elapsed >= client.DefaultCloseTimeout {
		t.Errorf("Close with the daemon gone took %v, the default bound", elapsed)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Close with the daemon gone: %v; want its deadline after ErrUnavailable", err)
	}
	if n := h.Unsaved(); n != 1 {
		t.Errorf("after a failed Close, Unsaved = %d, want 1", n)
	}
}

// WithLabels gives the labels to a session that New or OpenOrCreate
// creates; OpenOrCreate leaves an existing session's labels alone.
func TestWithLabels(t *testing.T) {
	c, ctx := dialSessiond(t)
	labels := map[string]string{"team": "a", "env": "test"}
	wantLabels := func(ref client.Ref, want map[string]string) {
		t.Helper()
		s, err := c.Get(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(s.Labels, want) {
			t.Errorf("%s has labels %v, want %v", ref, s.Labels, want)
		}
	}
	h, err := c.New(ctx, client.WithLabels(labels))
	if err != nil {
		t.Fatal(err)
	}
	wantLabels(client.ID(h.ID()), labels)

	for _, l := range []map[string]string{labels, {"team": "b"}} {
		o, err := c.OpenOrCreate(ctx, client.Alias("labelled"), client.WithLabels(l))
		if err != nil {
			t.Fatal(err)
		}
		wantLabels(client.Alias("labelled"), labels)
		if err := o.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// SetTitle and SetLabels change that field of the stored session, and only
// it; SetLabels replaces every label.
func TestUpdateSetTitleSetLabels(t *testing.T) {
	c, ctx := dialSessiond(t)
	sess, err := c.Create(ctx, client.CreateOptions{Title: "old", Summary: "kept", Labels: map[string]string{"a": "1", "b": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	ref := client.ID(sess.ID)
	for _, tc := range []struct {
		name   string
		opt    client.UpdateOption
		title  string
		labels map[string]string
	}{
		{"SetTitle", client.SetTitle("new"), "new", map[string]string{"a": "1", "b": "2"}},
		{"SetLabels", client.SetLabels(map[string]string{"c": "3"}), "new", map[string]string{"c": "3"}},
		{"SetLabels(nil)", client.SetLabels(nil), "new", nil},
	} {
		before, err := c.Get(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		upd, err := c.Update(ctx, ref, tc.opt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := c.Get(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []*client.Session{upd, got} {
			if s.Title != tc.title || s.Summary != "kept" || !maps.Equal(s.Labels, tc.labels) || s.Revision != before.Revision+1 {
				t.Errorf("after %s: title %q, summary %q, labels %v, revision %d; want %q, %q, %v, %d",
					tc.name, s.Title, s.Summary, s.Labels, s.Revision, tc.title, "kept", tc.labels, before.Revision+1)
			}
		}
	}
}
