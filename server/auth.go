package server

import (
	"context"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sessiond/sessiond/internal/auth"
	"github.com/sessiond/sessiond/storage"
)

// Authorisation.
//
// With --auth-tokens every call but a health check carries
// "authorization: Bearer <secret>". The Authorizer's interceptors decide
// before any handler runs, from the call's method and the namespace its
// request names, never from what the store holds:
//
//   - no token, a malformed header or an unknown secret: UNAUTHENTICATED;
//   - a method above the token's role, or a request naming a namespace
//     outside the token's: PERMISSION_DENIED.
//
// Every RPC names exactly one namespace (a ref's, or the namespace of a
// create, list or search), and a session is found by id only within the
// namespace the request names. So a token scoped to namespace A that asks
// for the id of a session living in B either names B (PERMISSION_DENIED,
// whether or not the id exists) or names A (NOT_FOUND, exactly as for an id
// that exists nowhere). A denied request therefore learns nothing about
// what exists: the decision is made before the store is asked. Fork, watch,
// load, list and search are covered the same way; a fork's new session is
// made in its source's namespace. One answer does depend on other
// namespaces, by design of the id space rather than of this layer: a
// create (or a save with create_if_missing) with a client-chosen id that is
// in use anywhere is ALREADY_EXISTS, since ids are unique across
// namespaces; ids are random UUIDs, so it tells only about an id the caller
// already holds.
//
// Health checks are open (load balancers and orchestrators call them without
// secrets). Reflection needs a valid token of any role. A method the table
// below does not know (a service added later) needs the admin role with
// access to every namespace: new surface is closed until it is classified.

// methodRule is what a method needs.
type methodRule struct {
	role       auth.Role
	namespaced bool // the request names a namespace the token must allow
	everyNS    bool // the token must allow every namespace ("*")
}

const servicePrefix = "/sessiond.v1.SessionStoreService/"

// methodRules classifies every SessionStoreService method. A test checks
// that it names every method of the service.
var methodRules = map[string]methodRule{
	servicePrefix + "GetSession":     {role: auth.RoleRead, namespaced: true},
	servicePrefix + "LoadSession":    {role: auth.RoleRead, namespaced: true},
	servicePrefix + "ListSessions":   {role: auth.RoleRead, namespaced: true},
	servicePrefix + "SearchSessions": {role: auth.RoleRead, namespaced: true},
	servicePrefix + "WatchSession":   {role: auth.RoleRead, namespaced: true},
	servicePrefix + "GetServerInfo":  {role: auth.RoleRead},
	servicePrefix + "CreateSession":  {role: auth.RoleWrite, namespaced: true},
	servicePrefix + "SaveSession":    {role: auth.RoleWrite, namespaced: true},
	servicePrefix + "AppendMessages": {role: auth.RoleWrite, namespaced: true},
	servicePrefix + "UpdateSession":  {role: auth.RoleWrite, namespaced: true},
	servicePrefix + "DeleteSession":  {role: auth.RoleWrite, namespaced: true},
	servicePrefix + "ForkSession":    {role: auth.RoleWrite, namespaced: true},
	servicePrefix + "RewindSession":  {role: auth.RoleWrite, namespaced: true},
	servicePrefix + "AppendStream":   {role: auth.RoleWrite, namespaced: true},
	servicePrefix + "CompactSession": {role: auth.RoleWrite, namespaced: true},
	servicePrefix + "AppendDelta":    {role: auth.RoleWrite, namespaced: true},
	servicePrefix + "FinishMessage":  {role: auth.RoleWrite, namespaced: true},
}

// openPrefixes are services anyone may call; tokenOnlyPrefixes need a valid
// token of any role.
var (
	openPrefixes      = []string{"/grpc.health.v1.Health/"}
	tokenOnlyPrefixes = []string{"/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"}
)

// unknownRule is what a method outside the tables needs.
var unknownRule = methodRule{role: auth.RoleAdmin, everyNS: true}

// ruleFor returns what method needs, and whether it needs a token at all.
func ruleFor(method string) (methodRule, bool) {
	for _, p := range openPrefixes {
		if strings.HasPrefix(method, p) {
			return methodRule{}, false
		}
	}
	for _, p := range tokenOnlyPrefixes {
		if strings.HasPrefix(method, p) {
			return methodRule{role: auth.RoleRead}, true
		}
	}
	if r, ok := methodRules[method]; ok {
		return r, true
	}
	return unknownRule, true
}

// requestNamespace returns the namespace a request message names, and false
// for a message that names none (a SaveSession frame after the header).
func requestNamespace(m any) (string, bool) {
	ns, _, _, ok := requestSession(m)
	return ns, ok
}

// TokenLookup finds the token a secret belongs to; auth.Keeper is one.
type TokenLookup interface {
	Lookup(secret string) (auth.Token, bool)
}

// Authorizer authenticates and authorises every call with bearer tokens.
// It is safe for concurrent use.
type Authorizer struct {
	tokens TokenLookup
	log    *zap.Logger
}

// NewAuthorizer returns an Authorizer over tokens, logging each refused call
// on log (nil: nop).
func NewAuthorizer(tokens TokenLookup, log *zap.Logger) *Authorizer {
	if log == nil {
		log = zap.NewNop()
	}
	return &Authorizer{tokens: tokens, log: log}
}

// ServerOptions returns the interceptors to add to a grpc.Server, after the
// Server's own (so that call logs and panic recovery see refused calls too).
func (a *Authorizer) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(a.unary),
		grpc.ChainStreamInterceptor(a.stream),
	}
}

func (a *Authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	rule, needed := ruleFor(info.FullMethod)
	if !needed {
		return handler(ctx, req)
	}
	tok, err := a.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	ns, _ := requestNamespace(req)
	if err := a.permit(ctx, info.FullMethod, rule, &tok, ns); err != nil {
		return nil, err
	}
	return handler(context.WithValue(ctx, callerTokenKey{}, tok), req)
}

// callerTokenKey keys the token of a unary call in its context, for
// GetServerInfo to report.
type callerTokenKey struct{}

// callerToken returns the token the unary call in ctx presented, if the
// Authorizer checked one.
func callerToken(ctx context.Context) (auth.Token, bool) {
	tok, ok := ctx.Value(callerTokenKey{}).(auth.Token)
	return tok, ok
}

func (a *Authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	rule, needed := ruleFor(info.FullMethod)
	if !needed {
		return handler(srv, ss)
	}
	tok, err := a.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	if !rule.namespaced {
		if err := a.permit(ss.Context(), info.FullMethod, rule, &tok, ""); err != nil {
			return err
		}
		return handler(srv, ss)
	}
	return handler(srv, &authStream{ServerStream: ss, a: a, method: info.FullMethod, rule: rule, tok: tok})
}

// authStream authorises a namespaced streaming call on the messages the
// client sends, before the handler sees them: the namespace is in the first
// message (SaveSession's header frame), which the interceptor has not read.
// The first message is always checked, at least for the role; later ones
// when they name a namespace.
type authStream struct {
	grpc.ServerStream
	a       *Authorizer
	method  string
	rule    methodRule
	tok     auth.Token
	checked bool // a message has been authorised (its role at least)
}

func (s *authStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	ns, ok := requestNamespace(m)
	switch {
	case ok:
		s.checked = true
		return s.a.permit(s.Context(), s.method, s.rule, &s.tok, ns)
	case !s.checked:
		s.checked = true
		roleOnly := s.rule
		roleOnly.namespaced = false
		return s.a.permit(s.Context(), s.method, roleOnly, &s.tok, "")
	}
	return nil
}

// authenticate finds the call's token.
func (a *Authorizer) authenticate(ctx context.Context, method string) (auth.Token, error) {
	secret, reason := bearer(ctx)
	if reason != "" {
		a.log.Warn("unauthenticated call refused", zap.String("method", method), zap.String("reason", reason), peerField(ctx))
		return auth.Token{}, status.Error(codes.Unauthenticated, authHint(ctx, reason))
	}
	tok, ok := a.tokens.Lookup(secret)
	if !ok {
		a.log.Warn("unauthenticated call refused", zap.String("method", method), zap.String("reason", "unknown token"), peerField(ctx))
		return auth.Token{}, status.Error(codes.Unauthenticated, "unknown token")
	}
	return tok, nil
}

// permit checks that tok may call method in namespace ns.
func (a *Authorizer) permit(ctx context.Context, method string, rule methodRule, tok *auth.Token, ns string) error {
	switch {
	case !tok.Can(rule.role):
		a.deny(ctx, method, tok, ns, "role "+tok.Role.String()+" may not call this method")
		return status.Errorf(codes.PermissionDenied, "token %q has role %s; %s needs %s", tok.Name, tok.Role, shortMethod(method), rule.role)
	case rule.everyNS && !tok.Allows(auth.AllNamespaces):
		a.deny(ctx, method, tok, ns, "method needs a token for every namespace")
		return status.Errorf(codes.PermissionDenied, "token %q may not call %s: it needs the admin role for every namespace (\"*\")", tok.Name, shortMethod(method))
	case rule.namespaced && !tok.Allows(ns):
		a.deny(ctx, method, tok, ns, "namespace outside the token's")
		return status.Errorf(codes.PermissionDenied, "token %q may not use %s", tok.Name, storage.DescribeNamespace(ns))
	}
	return nil
}

// deny logs a refused call: never the secret.
func (a *Authorizer) deny(ctx context.Context, method string, tok *auth.Token, ns, reason string) {
	a.log.Warn("permission denied",
		zap.String("token", tok.Name),
		zap.String("method", method),
		zap.String("namespace", ns),
		zap.String("reason", reason),
		peerField(ctx),
	)
}

// authHint tells a caller without a usable token how to send one: over the
// HTTP API as the Authorization header, over gRPC as metadata.
func authHint(ctx context.Context, reason string) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil && p.Addr.Network() == "http" {
		reason = strings.NewReplacer("authorization metadata", "Authorization header", "authorization value", "Authorization header").Replace(reason)
		return reason + `; send the header "Authorization: Bearer <token>"`
	}
	return reason + `; send "authorization: Bearer <token>" metadata`
}

// bearer returns the secret of the call's authorization metadata, or why
// there is none.
func bearer(ctx context.Context) (string, string) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	switch {
	case len(vals) == 0:
		return "", "no authorization metadata"
	case len(vals) > 1:
		return "", "more than one authorization value"
	}
	// Some clients keep the space after "authorization:" (grpcurl -H).
	secret, ok := auth.ParseBearer(vals[0])
	if !ok {
		return "", "authorization is not \"Bearer <token>\""
	}
	return secret, ""
}

// peerField names the caller: its address, and the subject of its client
// certificate under mutual TLS.
func peerField(ctx context.Context) zap.Field {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return zap.Skip()
	}
	addr := p.Addr.String()
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		if certs := ti.State.PeerCertificates; len(certs) > 0 {
			addr += " (client certificate " + certs[0].Subject.String() + ")"
		}
	}
	return zap.String("peer", addr)
}

func shortMethod(m string) string { return m[strings.LastIndexByte(m, '/')+1:] }
