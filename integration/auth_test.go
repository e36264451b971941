package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/auth"
	"github.com/sessiond/sessiond/internal/testcerts"
)

// The namespaces of the authorisation tests: tokens are scoped to A or B.
const (
	nsA = "team-a"
	nsB = "team-b"
)

// testTokens is a token file with one token of each kind the access matrix
// covers, and their secrets.
type testTokens struct {
	file                                   string
	readA, writeA, writeB, admin, removeMe string
}

func newTestTokens(t *testing.T, dir string) *testTokens {
	t.Helper()
	tt := &testTokens{file: filepath.Join(dir, "tokens.json")}
	for _, tok := range []struct {
		secret *string
		name   string
		nss    []string
		role   auth.Role
	}{
		{&tt.readA, "reader-a", []string{nsA}, auth.RoleRead},
		{&tt.writeA, "writer-a", []string{nsA}, auth.RoleWrite},
		{&tt.writeB, "writer-b", []string{nsB}, auth.RoleWrite},
		{&tt.admin, "ops", []string{auth.AllNamespaces}, auth.RoleAdmin},
		{&tt.removeMe, "leaver", []string{nsA}, auth.RoleWrite},
	} {
		s, err := auth.AddToken(tt.file, tok.name, tok.nss, tok.role)
		if err != nil {
			t.Fatal(err)
		}
		*tok.secret = s
	}
	return tt
}

// startAuthDaemon starts a plaintext loopback daemon with the tokens of
// newTestTokens, and returns a connection and a context for the test.
func startAuthDaemon(t *testing.T) (*testTokens, *daemon, *grpc.ClientConn, context.Context) {
	t.Helper()
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	d := startDaemon(t, filepath.Join(dir, "data"), "--auth-tokens", toks.file)
	return toks, d, d.conn(t), testContext(t, 2*time.Minute)
}

// withToken returns ctx carrying "authorization: Bearer secret" ("" none).
func withToken(ctx context.Context, secret string) context.Context {
	if secret == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secret)
}

// fixture is a fresh session in namespace A at revision 2, with two
// messages, for one cell of the access matrix.
type fixture struct {
	id, alias string
	touch     func() error // appends to the session as admin
}

func newFixture(t *testing.T, ctx context.Context, c sessiondv1.SessionStoreServiceClient, admin string) fixture {
	t.Helper()
	alias := "m-" + uuid.NewString()[:8]
	ctx = withToken(ctx, admin)
	resp, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: nsA, Alias: alias, Title: "matrix probe"})
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias(nsA, alias), Messages: []*sessiondv1.Message{
		textMsg("u1", sessiondv1.Role_ROLE_USER, "probe question"), textMsg("a1", sessiondv1.Role_ROLE_ASSISTANT, "probe answer"),
	}}); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	touch := func() error {
		_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias(nsA, alias),
			Messages: []*sessiondv1.Message{textMsg("u9", sessiondv1.Role_ROLE_USER, "touch")}})
		return err
	}
	return fixture{id: resp.GetSession().GetId(), alias: alias, touch: touch}
}

// rpcCall calls one RPC in namespace ns on session f (by id) and returns its
// error; streaming calls read their first answer.
type rpcCall func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error

func firstRecv[F any](s grpc.ServerStreamingClient[F], err error) error {
	if err != nil {
		return err
	}
	_, err = s.Recv()
	return err
}

// sessionRPCs are the RPCs of SessionStoreService, each aimed at namespace
// ns; with f in another namespace they reach a session by an id that lives
// elsewhere.
var sessionRPCs = []struct {
	name  string
	write bool // changes data (needs the write role)
	call  rpcCall
}{
	{"CreateSession", true, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		_, err := sessiondv1.NewSessionStoreServiceClient(cc).CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: ns, Title: "new"})
		return err
	}},
	{"GetSession", false, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		_, err := sessiondv1.NewSessionStoreServiceClient(cc).GetSession(ctx, &sessiondv1.GetSessionRequest{Ref: byID(ns, f.id)})
		return err
	}},
	{"LoadSession", false, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		return firstRecv(sessiondv1.NewSessionStoreServiceClient(cc).LoadSession(ctx, &sessiondv1.LoadSessionRequest{Ref: byID(ns, f.id)}))
	}},
	{"ListSessions", false, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		return firstRecv(sessiondv1.NewSessionStoreServiceClient(cc).ListSessions(ctx, &sessiondv1.ListSessionsRequest{Namespace: ns, Limit: 1}))
	}},
	{"SaveSession", true, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		_, err := saveSession(ctx, sessiondv1.NewSessionStoreServiceClient(cc), &sessiondv1.SaveSessionHeader{Ref: byID(ns, f.id), Title: "saved"},
			[]*sessiondv1.Message{textMsg("s1", sessiondv1.Role_ROLE_USER, "saved")})
		return err
	}},
	{"AppendMessages", true, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		_, err := sessiondv1.NewSessionStoreServiceClient(cc).AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(ns, f.id),
			Messages: []*sessiondv1.Message{textMsg("u2", sessiondv1.Role_ROLE_USER, "more")}})
		return err
	}},
	{"UpdateSession", true, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		_, err := sessiondv1.NewSessionStoreServiceClient(cc).UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID(ns, f.id),
			Session: &sessiondv1.Session{Title: "renamed"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}}})
		return err
	}},
	{"DeleteSession", true, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		_, err := sessiondv1.NewSessionStoreServiceClient(cc).DeleteSession(ctx, &sessiondv1.DeleteSessionRequest{Ref: byID(ns, f.id)})
		return err
	}},
	{"ForkSession", true, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		_, err := sessiondv1.NewSessionStoreServiceClient(cc).ForkSession(ctx, &sessiondv1.ForkSessionRequest{Ref: byID(ns, f.id), MessageCount: 1})
		return err
	}},
	{"RewindSession", true, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		_, err := sessiondv1.NewSessionStoreServiceClient(cc).RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID(ns, f.id), MessageCount: 1})
		return err
	}},
	{"CompactSession", true, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		_, err := sessiondv1.NewSessionStoreServiceClient(cc).CompactSession(ctx, &sessiondv1.CompactSessionRequest{Ref: byID(ns, f.id),
			ThroughMessageId: "u1", Summary: textMsg("s1", sessiondv1.Role_ROLE_SYSTEM, "probe summary")})
		return err
	}},
	{"SearchSessions", false, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		return firstRecv(sessiondv1.NewSessionStoreServiceClient(cc).SearchSessions(ctx, &sessiondv1.SearchSessionsRequest{Namespace: ns, Query: "probe"}))
	}},
	{"WatchSession", false, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		// The headers come once the watch is live (or the stream ends
		// without them when refused); then a change must reach it.
		w, err := sessiondv1.NewSessionStoreServiceClient(cc).WatchSession(ctx, &sessiondv1.WatchSessionRequest{Ref: byID(ns, f.id)})
		if err != nil {
			return err
		}
		if md, err := w.Header(); err != nil || md == nil {
			_, err = w.Recv()
			return err
		}
		if f.touch != nil {
			if err := f.touch(); err != nil {
				return fmt.Errorf("touch: %w", err)
			}
		}
		_, err = w.Recv()
		return err
	}},
	{"GetServerInfo", false, func(ctx context.Context, cc *grpc.ClientConn, ns string, f fixture) error {
		_, err := sessiondv1.NewSessionStoreServiceClient(cc).GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{})
		return err
	}},
}

// otherRPCs are the daemon's other services.
var otherRPCs = []struct {
	name string
	open bool // callable without a token
	call rpcCall
}{
	{"Health/Check", true, func(ctx context.Context, cc *grpc.ClientConn, _ string, _ fixture) error {
		_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}},
	{"ServerReflection", false, func(ctx context.Context, cc *grpc.ClientConn, _ string, _ fixture) error {
		s, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
		if err != nil {
			return err
		}
		// A Send that fails with io.EOF means the server has already
		// answered; Recv returns that answer.
		if err := s.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err = s.Recv()
		return err
	}},
}

// TestAccessMatrix calls every RPC with every kind of token against the
// real daemon and checks the exact code of each, then prints the matrix
// (go test -v -run TestAccessMatrix ./integration/).
func TestAccessMatrix(t *testing.T) {
	toks, d, cc, ctx := startAuthDaemon(t)
	c := sessiondv1.NewSessionStoreServiceClient(cc)

	kinds := []struct {
		name, secret string
		// code for a read RPC, a write RPC, GetServerInfo, reflection
		read, write, info, reflect codes.Code
	}{
		{"no token", "", codes.Unauthenticated, codes.Unauthenticated, codes.Unauthenticated, codes.Unauthenticated},
		{"bad token", "sessiond_not-a-token-anyone-has", codes.Unauthenticated, codes.Unauthenticated, codes.Unauthenticated, codes.Unauthenticated},
		{"read A", toks.readA, codes.OK, codes.PermissionDenied, codes.OK, codes.OK},
		{"write B on A", toks.writeB, codes.PermissionDenied, codes.PermissionDenied, codes.OK, codes.OK},
		{"write A", toks.writeA, codes.OK, codes.OK, codes.OK, codes.OK},
		{"admin *", toks.admin, codes.OK, codes.OK, codes.OK, codes.OK},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-17s", "RPC \\ token")
	for _, k := range kinds {
		fmt.Fprintf(&table, " | %-17s", k.name)
	}
	table.WriteString("\n" + strings.Repeat("-", 17+len(kinds)*20) + "\n")
	cell := func(name string, want codes.Code, call rpcCall, secret string) string {
		f := newFixture(t, ctx, c, toks.admin)
		callCtx, cancel := context.WithTimeout(withToken(ctx, secret), 20*time.Second)
		defer cancel()
		got := status.Code(call(callCtx, cc, nsA, f))
		mark := ""
		if got != want {
			t.Errorf("%s: got %v, want %v", name, got, want)
			mark = " (!)"
		}
		return codeName(got) + mark
	}
	for _, rpc := range sessionRPCs {
		fmt.Fprintf(&table, "%-17s", rpc.name)
		for _, k := range kinds {
			want := k.read
			switch {
			case rpc.name == "GetServerInfo":
				want = k.info
			case rpc.write:
				want = k.write
			}
			fmt.Fprintf(&table, " | %-17s", cell(rpc.name+" with "+k.name, want, rpc.call, k.secret))
		}
		table.WriteString("\n")
	}
	for _, rpc := range otherRPCs {
		fmt.Fprintf(&table, "%-17s", rpc.name)
		for _, k := range kinds {
			want := k.reflect
			if rpc.open {
				want = codes.OK
			}
			fmt.Fprintf(&table, " | %-17s", cell(rpc.name+" with "+k.name, want, rpc.call, k.secret))
		}
		table.WriteString("\n")
	}
	t.Logf("access matrix (session in namespace %s; read A and write A are scoped to %s, write B to %s, admin to *):\n%s", nsA, nsA, nsB, table.String())

	// Each refusal is logged with the token's name, never its secret.
	var denied int
	for _, l := range d.logLines() {
		if l["msg"] == "permission denied" {
			denied++
			if l["token"] == "" || l["method"] == "" || l["peer"] == nil {
				t.Errorf("denial logged without token, method or peer: %v", l)
			}
		}
	}
	if denied == 0 {
		t.Error("no denial was logged")
	}
	for _, s := range []string{toks.readA, toks.writeA, toks.writeB, toks.admin} {
		if strings.Contains(d.Logs(), s) {
			t.Fatal("the daemon's log holds a secret")
		}
	}
}

// codeName spells a code as the gRPC spec does: PERMISSION_DENIED.
func codeName(c codes.Code) string {
	var b strings.Builder
	prevLower := false
	for _, r := range c.String() {
		if prevLower && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		prevLower = r >= 'a' && r <= 'z'
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String())
}

// TestCrossNamespace reaches a session of namespace B with a write token of
// namespace A, by id in every RPC that takes one, and by alias: naming B is
// PERMISSION_DENIED whether the id exists or not, and naming A answers
// NOT_FOUND word for word as for an id that exists nowhere. Nothing of B's
// session changes, and A's listing and search never show it.
func TestCrossNamespace(t *testing.T) {
	toks, _, cc, ctx := startAuthDaemon(t)
	c := sessiondv1.NewSessionStoreServiceClient(cc)
	admin := withToken(ctx, toks.admin)

	secretB, err := c.CreateSession(admin, &sessiondv1.CreateSessionRequest{Namespace: nsB, Alias: "b-plans", Title: "needle in B",
		Messages: []*sessiondv1.Message{textMsg("m1", sessiondv1.Role_ROLE_USER, "needle")}})
	if err != nil {
		t.Fatal(err)
	}
	bID := secretB.GetSession().GetId()
	if _, err := c.CreateSession(admin, &sessiondv1.CreateSessionRequest{Namespace: nsA, Alias: "a-plans", Title: "needle in A"}); err != nil {
		t.Fatal(err)
	}
	missing := uuid.Must(uuid.NewV7()).String()
	asA := withToken(ctx, toks.writeA)

	byRef := []string{"GetSession", "LoadSession", "AppendMessages", "UpdateSession", "DeleteSession", "ForkSession", "RewindSession", "WatchSession", "SaveSession", "CompactSession"}
	for _, rpc := range sessionRPCs {
		if !strings.Contains(strings.Join(byRef, " "), rpc.name) {
			continue
		}
		t.Run(rpc.name, func(t *testing.T) {
			for _, id := range []string{bID, missing} {
				err := rpc.call(asA, cc, nsB, fixture{id: id})
				wantCode(t, err, codes.PermissionDenied)
			}
			errB := status.Convert(rpc.call(asA, cc, nsA, fixture{id: bID}))
			errMissing := status.Convert(rpc.call(asA, cc, nsA, fixture{id: missing}))
			if errB.Code() != codes.NotFound {
				t.Fatalf("B's id asked in A: %v; want NOT_FOUND", errB.Err())
			}
			if a, b := strings.ReplaceAll(errB.Message(), bID, "ID"), strings.ReplaceAll(errMissing.Message(), missing, "ID"); a != b || errB.Code() != errMissing.Code() {
				t.Errorf("B's id answers %v %q, a missing id %v %q: a client could tell them apart", errB.Code(), a, errMissing.Code(), b)
			}
		})
	}
	// By alias, in every RPC that takes a ref: the same.
	_, err = c.GetSession(asA, &sessiondv1.GetSessionRequest{Ref: byAlias(nsB, "b-plans")})
	wantCode(t, err, codes.PermissionDenied)
	_, err = c.GetSession(asA, &sessiondv1.GetSessionRequest{Ref: byAlias(nsA, "b-plans")})
	wantCode(t, err, codes.NotFound)
	_, err = c.CreateSession(asA, &sessiondv1.CreateSessionRequest{Namespace: nsB, Title: "planted"})
	wantCode(t, err, codes.PermissionDenied)

	// B's session is as it was.
	got, err := c.GetSession(admin, &sessiondv1.GetSessionRequest{Ref: byID(nsB, bID)})
	if err != nil || got.GetSession().GetRevision() != 1 || got.GetSession().GetTitle() != "needle in B" {
		t.Fatalf("B's session after the attempts: %v, %v", got, err)
	}

	// Listing and search with A's tokens show A only; asking for B is
	// refused.
	for _, secret := range []string{toks.readA, toks.writeA} {
		tok := withToken(ctx, secret)
		for _, s := range mustList(t, tok, c, &sessiondv1.ListSessionsRequest{Namespace: nsA}) {
			if s.GetNamespace() != nsA || s.GetId() == bID {
				t.Errorf("A's listing shows %v", s)
			}
		}
		hits, err := searchSessions(tok, c, &sessiondv1.SearchSessionsRequest{Namespace: nsA, Query: "needle"})
		if err != nil || len(hits) == 0 {
			t.Fatalf("search in A: %d hits, %v", len(hits), err)
		}
		for _, h := range hits {
			if h.GetSession().GetNamespace() != nsA {
				t.Errorf("A's search shows %v", h.GetSession())
			}
		}
		_, err = listSessions(tok, c, &sessiondv1.ListSessionsRequest{Namespace: nsB})
		wantCode(t, err, codes.PermissionDenied)
		_, err = searchSessions(tok, c, &sessiondv1.SearchSessionsRequest{Namespace: nsB, Query: "needle"})
		wantCode(t, err, codes.PermissionDenied)
	}
}

// tlsConn dials addr with TLS trusting caFile, with a client certificate
// when certFile is set; the connection is closed when the test ends.
func tlsConn(t *testing.T, addr, caFile, certFile, keyFile string) *grpc.ClientConn {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	cfg.RootCAs.AppendCertsFromPEM(pem)
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// infoErr calls GetServerInfo on cc with secret.
func infoErr(ctx context.Context, cc *grpc.ClientConn, secret string) error {
	ctx, cancel := context.WithTimeout(withToken(ctx, secret), 10*time.Second)
	defer cancel()
	_, err := sessiondv1.NewSessionStoreServiceClient(cc).GetServerInfo(ctx, &sessiondv1.GetServerInfoRequest{})
	return err
}

// servedSerial is the serial number of the certificate the daemon shows a
// new TLS connection that trusts caFile, or an error.
func servedSerial(addr, caFile string) (string, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return "", err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestTLS serves TLS with certificates the test makes: plaintext and a
// client that trusts another CA fail; the right CA and a token succeed; the
// certificate rotates without a restart (to one from a new CA), a broken
// rotation keeps the certificate in use, and connections made before a
// rotation keep working.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	ca1, ca2 := testcerts.NewCA(t, dir, "ca1"), testcerts.NewCA(t, dir, "ca2")
	certFile, keyFile, serial1 := ca1.Issue(t, dir, "server", false)
	d := startDaemon(t, filepath.Join(dir, "data"), "--auth-tokens", toks.file, "--tls-cert", certFile, "--tls-key", keyFile)
	ctx := testContext(t, 2*time.Minute)

	wantCode(t, infoErr(ctx, d.conn(t), toks.readA), codes.Unavailable) // plaintext to a TLS port
	wantCode(t, infoErr(ctx, tlsConn(t, d.Addr, ca2.PEMFile, "", ""), toks.readA), codes.Unavailable)
	good := tlsConn(t, d.Addr, ca1.PEMFile, "", "")
	if err := infoErr(ctx, good, toks.readA); err != nil {
		t.Fatalf("TLS with the right CA and a token: %v", err)
	}
	wantCode(t, infoErr(ctx, good, ""), codes.Unauthenticated)
	if s, err := servedSerial(d.Addr, ca1.PEMFile); err != nil || s != serial1.String() {
		t.Fatalf("served serial %s, %v; want %s", s, err, serial1)
	}

	// Rotation to a certificate of another CA, without a restart.
	_, _, serial2 := ca2.Issue(t, dir, "server", false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := servedSerial(d.Addr, ca2.PEMFile)
		if err == nil && s == serial2.String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new certificate is not served 10s after the files changed: %s, %v", s, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := infoErr(ctx, tlsConn(t, d.Addr, ca2.PEMFile, "", ""), toks.readA); err != nil {
		t.Fatalf("after rotation, a client trusting the new CA: %v", err)
	}
	if err := infoErr(ctx, good, toks.readA); err != nil {
		t.Fatalf("a connection made before the rotation: %v", err)
	}

	// A broken rotation keeps the certificate in use.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitLog(t, d, "TLS certificate not reloaded; new connections keep the one in use")
	if s, err := servedSerial(d.Addr, ca2.PEMFile); err != nil || s != serial2.String() {
		t.Fatalf("after a broken rotation: serial %s, %v; want %s", s, err, serial2)
	}
}

// TestMutualTLS: under --tls-client-ca a client without a certificate, or
// with one from another CA, is refused; one signed by the client CA gets in
// (and still needs its token).
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	serverCA, clientCA, otherCA := testcerts.NewCA(t, dir, "server-ca"), testcerts.NewCA(t, dir, "client-ca"), testcerts.NewCA(t, dir, "other-ca")
	certFile, keyFile, _ := serverCA.Issue(t, dir, "server", false)
	goodCert, goodKey, _ := clientCA.Issue(t, dir, "agent-a", true)
	badCert, badKey, _ := otherCA.Issue(t, dir, "intruder", true)
	d := startDaemon(t, filepath.Join(dir, "data"), "--auth-tokens", toks.file,
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", clientCA.PEMFile)
	ctx := testContext(t, 2*time.Minute)

	wantCode(t, infoErr(ctx, tlsConn(t, d.Addr, serverCA.PEMFile, "", ""), toks.readA), codes.Unavailable)
	wantCode(t, infoErr(ctx, tlsConn(t, d.Addr, serverCA.PEMFile, badCert, badKey), toks.readA), codes.Unavailable)
	good := tlsConn(t, d.Addr, serverCA.PEMFile, goodCert, goodKey)
	if err := infoErr(ctx, good, toks.readA); err != nil {
		t.Fatalf("client certificate of the client CA: %v", err)
	}
	wantCode(t, infoErr(ctx, good, ""), codes.Unauthenticated)
	if l := waitLog(t, d, "unauthenticated call refused"); !strings.Contains(fmt.Sprint(l["peer"]), "CN=agent-a") {
		t.Errorf("the refusal's peer does not name the client certificate: %v", l)
	}
}

// waitLog waits up to 10 s for a log line with message msg.
func waitLog(t *testing.T, d *daemon, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range d.logLines() {
			if l["msg"] == msg {
				return l
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no log line %q within 10s", msg)
	return nil
}

// TestTokenReload: after SIGHUP a removed token stops working within a
// second, on the same connection (nothing is dropped); a token file that
// cannot be parsed changes nothing; a file edit is picked up without a
// signal.
func TestTokenReload(t *testing.T) {
	toks, d, cc, ctx := startAuthDaemon(t)
	if err := infoErr(ctx, cc, toks.removeMe); err != nil {
		t.Fatal(err)
	}

	if err := auth.RemoveToken(toks.file, "leaver"); err != nil {
		t.Fatal(err)
	}
	if err := d.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for infoErr(ctx, cc, toks.removeMe) == nil {
		if time.Since(start) > time.Second {
			t.Fatal("the removed token still works a second after SIGHUP")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("removed token refused %v after SIGHUP", time.Since(start).Round(time.Millisecond))
	wantCode(t, infoErr(ctx, cc, toks.removeMe), codes.Unauthenticated)
	if err := infoErr(ctx, cc, toks.writeA); err != nil {
		t.Fatalf("a kept token after the reload: %v", err)
	}

	// A broken file: an error in the log, every token as it was.
	if err := os.WriteFile(toks.file, []byte(`{"tokens": [{"name": "x"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, d, "token file not reloaded")
	for _, s := range []string{toks.readA, toks.writeA, toks.writeB, toks.admin} {
		if err := infoErr(ctx, cc, s); err != nil {
			t.Fatalf("after a broken file: %v", err)
		}
	}
	wantCode(t, infoErr(ctx, cc, toks.removeMe), codes.Unauthenticated)

	// A file edit without a signal: a new token works within the poll.
	if err := os.WriteFile(toks.file, []byte(`{"tokens": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	fresh, err := auth.AddToken(toks.file, "fresh", []string{nsA}, auth.RoleRead)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for infoErr(ctx, cc, fresh) != nil {
		if time.Now().After(deadline) {
			t.Fatal("a token added to the file does not work 5s later")
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantCode(t, infoErr(ctx, cc, toks.admin), codes.Unauthenticated)
}

// tlsExampleDaemon is a daemon serving TLS with tokens, for docs/security.md's
// examples over TLS.
type tlsExampleDaemon struct {
	*daemon
	ca, token string
}

// startTLSExampleDaemon starts a daemon with TLS (a certificate of a CA the
// test makes) and a write token for namespace A, and returns it, the CA file
// and the environment the examples read (SESSIOND_TOKEN,
// SESSIOND_NAMESPACE).
func startTLSExampleDaemon(t *testing.T) (*tlsExampleDaemon, string, []string) {
	t.Helper()
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	ca := testcerts.NewCA(t, dir, "example")
	certFile, keyFile, _ := ca.Issue(t, dir, "server", false)
	d := startDaemon(t, filepath.Join(dir, "data"), "--auth-tokens", toks.file, "--tls-cert", certFile, "--tls-key", keyFile)
	return &tlsExampleDaemon{daemon: d, ca: ca.PEMFile, token: toks.writeA}, ca.PEMFile,
		[]string{"SESSIOND_TOKEN=" + toks.writeA, "SESSIOND_NAMESPACE=" + nsA}
}

// checkTLSExample checks over TLS, with the token, that two runs of an
// example stored four messages under alias in namespace A.
func (d *tlsExampleDaemon) checkTLSExample(t *testing.T, alias string) {
	t.Helper()
	c := sessiondv1.NewSessionStoreServiceClient(tlsConn(t, d.Addr, d.ca, "", ""))
	checkAliasCountWith(t, withToken(testContext(t, 30*time.Second), d.token), c, nsA, alias, 4)
}
