package server

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/auth"
	"github.com/sessiond/sessiond/storage"
)

// Every method of the service is classified: a new RPC cannot slip through
// as "unknown, admin only" unnoticed, nor open by accident.
func TestMethodRulesCoverService(t *testing.T) {
	desc := sessiondv1.SessionStoreService_ServiceDesc
	var names []string
	for _, m := range desc.Methods {
		names = append(names, m.MethodName)
	}
	for _, s := range desc.Streams {
		names = append(names, s.StreamName)
	}
	if len(names) != len(methodRules) {
		t.Errorf("service has %d methods, methodRules %d", len(names), len(methodRules))
	}
	for _, n := range names {
		if _, ok := methodRules["/"+desc.ServiceName+"/"+n]; !ok {
			t.Errorf("methodRules lacks %s", n)
		}
	}
}

func TestRequestNamespace(t *testing.T) {
	ref := &sessiondv1.SessionRef{Namespace: "b"}
	for _, m := range []any{
		&sessiondv1.CreateSessionRequest{Namespace: "b"},
		&sessiondv1.GetSessionRequest{Ref: ref},
		&sessiondv1.LoadSessionRequest{Ref: ref},
		&sessiondv1.ListSessionsRequest{Namespace: "b"},
		&sessiondv1.SaveSessionRequest{Header: &sessiondv1.SaveSessionHeader{Ref: ref}},
		&sessiondv1.AppendMessagesRequest{Ref: ref},
		&sessiondv1.UpdateSessionRequest{Ref: ref},
		&sessiondv1.DeleteSessionRequest{Ref: ref},
		&sessiondv1.ForkSessionRequest{Ref: ref},
		&sessiondv1.RewindSessionRequest{Ref: ref},
		&sessiondv1.SearchSessionsRequest{Namespace: "b"},
		&sessiondv1.WatchSessionRequest{Ref: ref},
		&sessiondv1.AppendStreamRequest{Append: &sessiondv1.AppendMessagesRequest{Ref: ref}},
		&sessiondv1.CompactSessionRequest{Ref: ref},
	} {
		if ns, ok := requestNamespace(m); !ok || ns != "b" {
			t.Errorf("requestNamespace(%T) = %q, %v", m, ns, ok)
		}
	}
	if _, ok := requestNamespace(&sessiondv1.SaveSessionRequest{}); ok {
		t.Error("a SaveSession message frame names a namespace")
	}
}

// SaveSession names its namespace in its first frame, which the interceptor
// only sees through the wrapped stream: a save into a namespace outside the
// token's is refused and writes nothing; the refusal is logged with the
// token's name, never its secret.
func TestAuthorizerStreamNamespace(t *testing.T) {
	const secret = "sessiond_test-secret-a"
	h := auth.HashSecret(secret)
	set, err := auth.Parse([]byte(`{"tokens": [{"name": "writer-a", "sha256": "` + hex.EncodeToString(h[:]) +
		`", "namespaces": ["a"], "role": "write"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	hs := newHarness(t, harnessConfig{grpcOpts: NewAuthorizer(set, zap.New(core)).ServerOptions()})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+secret)

	for _, tt := range []struct {
		ns   string
		want codes.Code
	}{{"b", codes.PermissionDenied}, {"a", codes.OK}} {
		st, err := hs.client.SaveSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ref := &sessiondv1.SessionRef{Namespace: tt.ns, Key: &sessiondv1.SessionRef_Alias{Alias: "s"}}
		_ = st.Send(&sessiondv1.SaveSessionRequest{
			Header: &sessiondv1.SaveSessionHeader{Ref: ref, CreateIfMissing: true}})
		_, err = st.CloseAndRecv()
		if status.Code(err) != tt.want {
			t.Fatalf("SaveSession into %q: %v; want %v", tt.ns, err, tt.want)
		}
	}
	if _, err := hs.file.Get(t.Context(), storage.Ref{Namespace: "b", Alias: "s"}); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the refused save wrote: Get = %v", err)
	}
	denied := logs.FilterMessage("permission denied").All()
	if len(denied) != 1 {
		t.Fatalf("%d denial log lines, want 1", len(denied))
	}
	fields := denied[0].ContextMap()
	if fields["token"] != "writer-a" || fields["namespace"] != "b" || !strings.HasSuffix(fields["method"].(string), "/SaveSession") || fields["peer"] == nil {
		t.Fatalf("denial logged as %v", fields)
	}
	for _, e := range logs.All() {
		for _, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, secret) {
				t.Fatalf("a log line holds the secret: %v", e.ContextMap())
			}
		}
	}

	// Malformed authorization values are UNAUTHENTICATED, as is no value.
	for _, v := range []string{"", "Basic abc", "Bearer ", secret} {
		ctx := t.Context()
		if v != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", v)
		}
		_, err := hs.client.GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("authorization %q: %v; want UNAUTHENTICATED", v, err)
		}
	}
	for _, v := range []string{"bearer " + secret, " Bearer " + secret, "Bearer  " + secret + " "} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", v)
		if _, err := hs.client.GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{}); err != nil {
			t.Errorf("authorization %q: %v", v, err)
		}
	}
}

// GetServerInfo tells a caller its own token's scope (the viewer's
// namespace picker lists it), and nothing of other tokens; without tokens
// it reports none.
func TestServerInfoReportsCallerToken(t *testing.T) {
	tokens := map[string]string{ // secret -> entry
		"sessiond_test-reader": `{"name": "reader", "namespaces": ["team-b", "", "team-a"], "role": "read"}`,
		"sessiond_test-ops":    `{"name": "ops", "namespaces": ["*", "team-a"], "role": "admin"}`,
	}
	var entries []string
	for secret, e := range tokens {
		h := auth.HashSecret(secret)
		entries = append(entries, strings.Replace(e, "{", `{"sha256": "`+hex.EncodeToString(h[:])+`", `, 1))
	}
	set, err := auth.Parse([]byte(`{"tokens": [` + strings.Join(entries, ",") + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	hs := newHarness(t, harnessConfig{grpcOpts: NewAuthorizer(set, nil).ServerOptions()})
	for secret, want := range map[string]*sessiondv1.TokenAccess{
		"sessiond_test-reader": {Name: "reader", Role: "read", Namespaces: []string{"team-b", "", "team-a"}},
		"sessiond_test-ops":    {Name: "ops", Role: "admin", Namespaces: []string{"team-a"}, AllNamespaces: true},
	} {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+secret)
		info, err := hs.client.GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, info.GetToken(), protocmp.Transform()); diff != "" {
			t.Errorf("GetServerInfo with %s's token: token (-want +got):\n%s", want.GetName(), diff)
		}
	}

	open := newHarness(t, harnessConfig{})
	info, err := open.client.GetServerInfo(t.Context(), &sessiondv1.GetServerInfoRequest{})
	if err != nil || info.Token != nil {
		t.Errorf("GetServerInfo without tokens: token %v, %v; want none", info.GetToken(), err)
	}
}

// BenchmarkAuthorize measures what the Authorizer adds to each unary call
// (hash the secret, compare with every token, check role and namespace),
// with files of 1 and 1000 tokens:
//
//	go test -run '^$' -bench Authorize ./server/
func BenchmarkAuthorize(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			var entries []string
			var secret string
			for i := range n {
				secret = fmt.Sprintf("sessiond_bench-%d", i)
				h := auth.HashSecret(secret)
				entries = append(entries, fmt.Sprintf(`{"name": "t%d", "sha256": "%s", "namespaces": ["a"], "role": "write"}`, i, hex.EncodeToString(h[:])))
			}
			set, err := auth.Parse([]byte(`{"tokens": [` + strings.Join(entries, ",") + `]}`))
			if err != nil {
				b.Fatal(err)
			}
			a := NewAuthorizer(set, nil)
			ctx := metadata.NewIncomingContext(b.Context(), metadata.Pairs("authorization", "Bearer "+secret))
			req := &sessiondv1.GetSessionRequest{Ref: &sessiondv1.SessionRef{Namespace: "a"}}
			info := &grpc.UnaryServerInfo{FullMethod: servicePrefix + "GetSession"}
			handler := func(context.Context, any) (any, error) { return nil, nil }
			b.ResetTimer()
			for b.Loop() {
				if _, err := a.unary(ctx, req, info, handler); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
