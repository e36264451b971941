package clienttest_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

func TestDialAddresses(t *testing.T) {
	// Unix socket paths must stay under ~108 bytes, which t.TempDir may not.
	sockDir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "s.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	us, err := clienttest.Start(t.TempDir(), clienttest.WithListener(ul))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(us.Stop)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := clienttest.Start(t.TempDir(), clienttest.WithListener(tl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Stop)

	for _, addr := range []string{"unix://" + sock, "unix:" + sock, ts.Addr()} {
		t.Run(addr, func(t *testing.T) {
			c, err := client.Dial(t.Context(), addr)
			if err != nil {
				t.Fatalf("Dial(%q): %v", addr, err)
			}
			defer c.Close()
			s, err := c.Create(t.Context(), client.CreateOptions{Title: "over " + addr})
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			got, err := c.Get(t.Context(), client.ID(s.ID))
			if err != nil || got.Title != "over "+addr {
				t.Fatalf("Get = %+v, %v", got, err)
			}
		})
	}

	t.Run("nobody listening", func(t *testing.T) {
		free, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := free.Addr().String()
		_ = free.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := client.Dial(ctx, addr); !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("Dial(%s) = %v, want ErrUnavailable", addr, err)
		}
		c, err := client.Dial(ctx, addr, client.WithLazyConnect())
		if err != nil {
			t.Fatalf("lazy Dial: %v", err)
		}
		defer c.Close()
		if _, err := c.Get(ctx, client.Alias("x")); !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("Get with nobody listening = %v, want ErrUnavailable", err)
		}
	})
}

func TestPerRPCToken(t *testing.T) {
	check := func(ctx context.Context) error {
		md, _ := metadata.FromIncomingContext(ctx)
		if slices.Contains(md.Get("authorization"), "Bearer s3cret") {
			return nil
		}
		return status.Error(codes.Unauthenticated, "missing or wrong token")
	}
	srv := clienttest.NewServer(t, clienttest.WithGRPCServerOptions(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := check(ctx); err != nil {
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(s any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := check(ss.Context()); err != nil {
				return err
			}
			return h(s, ss)
		}),
	))
	good := srv.Dial(t, client.WithToken("s3cret"))
	s, err := good.Create(t.Context(), client.CreateOptions{Alias: "tok"})
	if err != nil {
		t.Fatalf("Create with token: %v", err)
	}
	for _, err := range good.List(t.Context(), client.ListOptions{}) {
		if err != nil {
			t.Fatalf("List (a stream) with token: %v", err)
		}
	}
	bad := srv.Dial(t, client.WithToken("wrong"))
	if _, err := bad.Get(t.Context(), client.ID(s.ID)); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Get with a wrong token = %v, want Unauthenticated", err)
	}
}

func TestTransportCredentials(t *testing.T) {
	cert, pool := selfSigned(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := clienttest.Start(t.TempDir(), clienttest.WithListener(lis), clienttest.WithGRPCServerOptions(
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})),
	))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)

	c, err := client.Dial(t.Context(), srv.Addr(),
		client.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13})))
	if err != nil {
		t.Fatalf("Dial with TLS: %v", err)
	}
	defer c.Close()
	if _, err := c.ServerInfo(t.Context()); err != nil {
		t.Fatalf("ServerInfo over TLS: %v", err)
	}
	// Plain text to a TLS server must not work.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if c2, err := client.Dial(ctx, srv.Addr()); err == nil {
		_, err = c2.ServerInfo(ctx)
		_ = c2.Close()
		if err == nil {
			t.Error("an insecure client talked to a TLS server")
		}
	}
}

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sessiond test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// TestRPCWrappers calls every RPC through the SDK's wrappers.
func TestRPCWrappers(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()

	info, err := c.ServerInfo(ctx)
	if err != nil || info.Backend != "file" || info.Limits.GetMaxMessageBytes() == 0 {
		t.Fatalf("ServerInfo = %+v, %v", info, err)
	}

	first := []*sessiondv1.Message{
		{Id: "m1", Role: sessiondv1.Role_ROLE_USER, Content: "hello wrappers"},
		{Id: "m2", Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "hi",
			ToolCalls: []*sessiondv1.ToolCall{{Id: "t1", Name: "f", Arguments: `{"a": 1,}`}}},
	}
	s, err := c.Create(ctx, client.CreateOptions{Alias: "wrap", Title: "T", Labels: map[string]string{"k": "v"}, Messages: first})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if s.Revision != 1 || s.MessageCount != 2 || s.Alias != "wrap" {
		t.Fatalf("Create = %+v", s)
	}

	got, msgs, err := c.Load(ctx, client.Alias("wrap"), client.LoadOptions{})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got.ID != s.ID {
		t.Errorf("Load by alias found %s, want %s", got.ID, s.ID)
	}
	if diff := cmp.Diff(first, msgs, protocmp.Transform(), protocmp.IgnoreFields(&sessiondv1.Message{}, "created_at")); diff != "" {
		t.Errorf("Load messages (-want +got):\n%s", diff)
	}

	res, err := c.Append(ctx, client.ID(s.ID), 1, userMsg("third"))
	if err != nil || res.Revision != 2 || res.MessageCount != 3 {
		t.Fatalf("Append = %+v, %v", res, err)
	}
	var streamed []string
	for m, err := range c.LoadMessages(ctx, client.ID(s.ID), client.LoadOptions{Offset: 1}) {
		if err != nil {
			t.Fatalf("LoadMessages: %v", err)
		}
		streamed = append(streamed, m.GetContent())
	}
	if want := []string{"hi", "third"}; !slices.Equal(streamed, want) {
		t.Errorf("LoadMessages(offset 1) = %q, want %q", streamed, want)
	}

	saved, err := c.Save(ctx, client.ID(s.ID), client.SaveOptions{
		ExpectedRevision: 2, Title: "T2", Summary: "sum", Messages: []*sessiondv1.Message{userMsg("only")},
	})
	if err != nil || saved.Title != "T2" || saved.MessageCount != 1 || saved.Revision != 3 {
		t.Fatalf("Save = %+v, %v", saved, err)
	}

	upd, err := c.Update(ctx, client.ID(s.ID), client.SetAlias("wrap2"), client.SetSummary("s2"), client.IfRevision(3))
	if err != nil || upd.Alias != "wrap2" || upd.Summary != "s2" {
		t.Fatalf("Update = %+v, %v", upd, err)
	}

	fork, err := c.Fork(ctx, client.Alias("wrap2"), client.ForkOptions{Alias: "forked"})
	if err != nil || fork.Parent == nil || fork.Parent.SessionID != s.ID || fork.MessageCount != 1 {
		t.Fatalf("Fork = %+v, %v", fork, err)
	}

	rw, err := c.Rewind(ctx, fork.Ref(), 0, 0)
	if err != nil || rw.MessageCount != 0 {
		t.Fatalf("Rewind = %+v, %v", rw, err)
	}

	var hits []client.SearchHit
	for h, err := range c.Search(ctx, "ONLY", 0) {
		if err != nil {
			t.Fatalf("Search: %v", err)
		}
		hits = append(hits, h)
	}
	if len(hits) != 1 || hits[0].Session.ID != s.ID || hits[0].MessageIndex != 0 {
		t.Errorf("Search hits = %+v", hits)
	}

	// List pages: the page token of the first session resumes after it.
	var ids []string
	var token string
	for sess, err := range c.List(ctx, client.ListOptions{}) {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		ids = append(ids, sess.ID)
		if token == "" {
			token = sess.PageToken
		}
	}
	if len(ids) != 2 {
		t.Fatalf("List = %v, want 2 sessions", ids)
	}
	var rest []string
	for sess, err := range c.List(ctx, client.ListOptions{PageToken: token}) {
		if err != nil {
			t.Fatalf("List page 2: %v", err)
		}
		rest = append(rest, sess.ID)
	}
	if !slices.Equal(rest, ids[1:]) {
		t.Errorf("List after token = %v, want %v", rest, ids[1:])
	}

	// Watch from the current revision: a later append arrives as an event.
	// If the append lands before the watch is set up, the server cannot
	// replay it (it keeps history only for sessions watched, or refused a
	// watch, before) and answers ErrWatchReset: then, as its doc says, start
	// again from the current revision; from then on the session's history is
	// kept, so the second attempt gets its append whichever way it races.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	events := make(chan client.Event, 4)
	werr := make(chan error, 1)
	for attempt := 0; ; attempt++ {
		cur, err := c.Get(ctx, client.ID(s.ID))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for ev, err := range c.Watch(wctx, client.ID(s.ID), cur.Revision) {
				if err != nil {
					werr <- err
					return
				}
				events <- ev
				if ev.Type == client.EventDeleted {
					werr <- nil
					return
				}
			}
		}()
		text := fmt.Sprintf("watched %d", attempt)
		if _, err := c.Append(ctx, client.ID(s.ID), 0, userMsg(text)); err != nil {
			t.Fatalf("Append: %v", err)
		}
		select {
		case ev := <-events:
			if ev.Type != client.EventAppended || ev.Revision != cur.Revision+1 || len(ev.Messages) != 1 || ev.Messages[0].GetContent() != text {
				t.Fatalf("event = %+v", ev)
			}
		case err := <-werr:
			if errors.Is(err, client.ErrWatchReset) && attempt < 5 {
				continue
			}
			t.Fatalf("watch ended: %v", err)
		case <-wctx.Done():
			t.Fatal("no event for the append")
		}
		break
	}

	if err := c.Delete(ctx, client.ID(s.ID), 0); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	select {
	case err := <-werr:
		if err != nil {
			t.Errorf("watch ended with %v, want after EventDeleted", err)
		}
	case <-wctx.Done():
		t.Error("watch did not end after Delete")
	}
	if _, err := c.Get(ctx, client.ID(s.ID)); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
}

func TestNamespaces(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t, client.WithNamespace("team-a"))
	ctx := t.Context()
	s, err := c.Create(ctx, client.CreateOptions{Alias: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Namespace != "team-a" {
		t.Errorf("Create in namespace %q, want team-a", s.Namespace)
	}
	// The default namespace does not see it, by id or alias.
	if _, err := c.Get(ctx, client.ID(s.ID).In("")); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Get in \"\" = %v, want ErrNotFound", err)
	}
	if _, err := c.In("").Get(ctx, client.Alias("x")); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("In(\"\").Get = %v, want ErrNotFound", err)
	}
	other := srv.Dial(t)
	if _, err := other.Get(ctx, client.Alias("x").In("team-a")); err != nil {
		t.Errorf("Ref.In(team-a) from a default client: %v", err)
	}
	n := 0
	for _, err := range other.In("team-a").List(ctx, client.ListOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Errorf("In(team-a).List found %d sessions, want 1", n)
	}
}

// TestErrorsPerRPC provokes each sentinel from the real server.
func TestErrorsPerRPC(t *testing.T) {
	srv := clienttest.NewServer(t)
	c := srv.Dial(t)
	ctx := t.Context()
	s, err := c.Create(ctx, client.CreateOptions{Alias: "taken", Messages: []*sessiondv1.Message{{Id: "m1", Role: sessiondv1.Role_ROLE_USER, Content: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Create(ctx, client.CreateOptions{Alias: "other"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want error
		code codes.Code
	}{
		{"get missing", func() error { _, err := c.Get(ctx, client.Alias("nope")); return err }, client.ErrNotFound, codes.NotFound},
		{"create taken alias", func() error { _, err := c.Create(ctx, client.CreateOptions{Alias: "taken"}); return err }, client.ErrAliasInUse, codes.AlreadyExists},
		{"rename to taken alias", func() error { _, err := c.Update(ctx, other.Ref(), client.SetAlias("taken")); return err }, client.ErrAliasInUse, codes.AlreadyExists},
		{"fork to taken alias", func() error { _, err := c.Fork(ctx, s.Ref(), client.ForkOptions{Alias: "taken"}); return err }, client.ErrAliasInUse, codes.AlreadyExists},
		{"append clashing message id", func() error {
			_, err := c.Append(ctx, s.Ref(), 0, &sessiondv1.Message{Id: "m1", Role: sessiondv1.Role_ROLE_USER, Content: "b"})
			return err
		}, client.ErrMessageConflict, codes.AlreadyExists},
		{"append at stale revision", func() error { _, err := c.Append(ctx, s.Ref(), 7, userMsg("x")); return err }, client.ErrConflict, codes.Aborted},
		{"rewind beyond", func() error { _, err := c.Rewind(ctx, s.Ref(), 5, 0); return err }, client.ErrInvalid, codes.InvalidArgument},
		{"bad alias", func() error { _, err := c.Get(ctx, client.Alias("a/b")); return err }, client.ErrInvalid, codes.InvalidArgument},
		{"empty update", func() error { _, err := c.Update(ctx, s.Ref()); return err }, client.ErrInvalid, codes.InvalidArgument},
		{"title over limit", func() error {
			_, err := c.Create(ctx, client.CreateOptions{Title: strings.Repeat("t", 2000)})
			return err
		}, client.ErrTooLarge, codes.ResourceExhausted},
		{"watch from the future", func() error {
			for _, err := range c.Watch(ctx, s.Ref(), 99) {
				return err
			}
			return nil
		}, client.ErrWatchReset, codes.OutOfRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if got := status.Code(err); got != tt.code {
				t.Errorf("status.Code = %v, want %v", got, tt.code)
			}
		})
	}

	t.Run("closed client", func(t *testing.T) {
		c2 := srv.Dial(t)
		if err := c2.Close(); err != nil {
			t.Fatal(err)
		}
		if err := c2.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
		if _, err := c2.Get(ctx, s.Ref()); !errors.Is(err, client.ErrClosed) {
			t.Errorf("Get after Close = %v, want ErrClosed", err)
		}
	})
	t.Run("server down", func(t *testing.T) {
		srv2 := clienttest.NewServer(t)
		c3 := srv2.Dial(t)
		srv2.Stop()
		if _, err := c3.Get(ctx, client.Alias("x")); !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("Get with the server stopped = %v, want ErrUnavailable", err)
		}
	})
}
