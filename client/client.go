package client

import (
	"cmp"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// DefaultAddr is where sessiond listens unless told otherwise.
const DefaultAddr = "127.0.0.1:7437"

// Client is a connection to sessiond. It is safe for concurrent use. A
// Client made by In shares its connection with the Client it came from.
type Client struct {
	conn      *conn
	namespace string
}

// conn is the connection that a Client and the Clients derived from it by In
// share.
type conn struct {
	cc     *grpc.ClientConn
	rpc    sessiondv1.SessionStoreServiceClient
	log    *slog.Logger
	closed atomic.Bool
	// appends is the AppendStream that handles' appends share.
	appends appendStream
}

type dialOptions struct {
	creds     credentials.TransportCredentials
	perRPC    credentials.PerRPCCredentials
	namespace string
	logger    *slog.Logger
	dialer    func(context.Context, string) (net.Conn, error)
	lazy      bool
	grpcOpts  []grpc.DialOption
	err       error // an option that could not be applied (WithTLSFiles)
}

// DialOption configures Dial.
type DialOption func(*dialOptions)

// WithTransportCredentials sets the transport security (e.g. TLS from
// credentials.NewTLS). The default is an insecure connection, which suits the
// daemon's default loopback or unix-socket address.
func WithTransportCredentials(creds credentials.TransportCredentials) DialOption {
	return func(o *dialOptions) { o.creds = creds }
}

// WithPerRPCCredentials sends any gRPC per-call credentials with every call.
func WithPerRPCCredentials(c credentials.PerRPCCredentials) DialOption {
	return func(o *dialOptions) { o.perRPC = c }
}

// WithNamespace sets the namespace every call uses unless a Ref names
// another (Ref.In) or the call goes through Client.In. The default is "".
func WithNamespace(ns string) DialOption {
	return func(o *dialOptions) { o.namespace = ns }
}

// WithLogger sets the logger for auto-save failures, retries and spool
// problems; the default discards everything. The SDK takes the standard
// library's structured logger so that a program embedding it keeps its own
// logging library: slog.New(handler) adapts most of them.
func WithLogger(l *slog.Logger) DialOption {
	return func(o *dialOptions) { o.logger = l }
}

// WithContextDialer replaces the network dialer, e.g. with a bufconn
// listener's in tests.
func WithContextDialer(d func(ctx context.Context, addr string) (net.Conn, error)) DialOption {
	return func(o *dialOptions) { o.dialer = d }
}

// WithLazyConnect makes Dial return at once without checking that the daemon
// answers; the first call connects.
func WithLazyConnect() DialOption {
	return func(o *dialOptions) { o.lazy = true }
}

// WithGRPCDialOptions passes options straight to grpc.NewClient, after the
// SDK's own (so they win).
func WithGRPCDialOptions(opts ...grpc.DialOption) DialOption {
	return func(o *dialOptions) { o.grpcOpts = append(o.grpcOpts, opts...) }
}

// bearerToken is a PerRPCCredentials sending a static bearer token.
type bearerToken string

func (t bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(t)}, nil
}

// RequireTransportSecurity is false so that tokens work over the loopback and
// unix-socket connections sessiond uses by default; Dial refuses a token
// without TLS to any other address.
func (bearerToken) RequireTransportSecurity() bool { return false }

// Dial connects to sessiond at addr: "host:port", or a unix socket as
// "unix:///abs/path" or "unix:/abs/path" (a relative "unix:path" works too).
// Unless WithLazyConnect is given, Dial waits until the connection is up, and
// fails with ErrUnavailable when the first attempt fails or ctx ends first.
func Dial(ctx context.Context, addr string, opts ...DialOption) (*Client, error) {
	var o dialOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.err != nil {
		return nil, o.err
	}
	if err := o.applyTokenEnv(addr); err != nil {
		return nil, err
	}
	target, err := dialTarget(addr)
	if err != nil {
		return nil, err
	}
	creds := o.creds
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	gopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// The daemon is usually local: after it restarts, reconnect within
		// seconds rather than after gRPC's default backoff of up to 2 min,
		// so that a handle's pending turns go out promptly.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   2 * time.Second,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
		// Fixed flow-control windows, as the daemon's: grpc-go's window
		// estimation would send the daemon a PING to answer after every
		// answer that brings data, a frame each way per call. 4 MiB per
		// stream keeps a large LoadSession streaming at 400 MiB/s over a
		// 10 ms round trip.
		grpc.WithInitialWindowSize(4 << 20), grpc.WithInitialConnWindowSize(16 << 20),
	}
	if o.perRPC != nil {
		gopts = append(gopts, grpc.WithPerRPCCredentials(o.perRPC))
	}
	if o.dialer != nil {
		gopts = append(gopts, grpc.WithContextDialer(o.dialer))
	}
	gopts = append(gopts, o.grpcOpts...)
	cc, err := grpc.NewClient(target, gopts...)
	if err != nil {
		return nil, errorf("client: dial %s: %w: %w", addr, ErrInvalid, err)
	}
	c := &Client{
		conn: &conn{
			cc:  cc,
			rpc: sessiondv1.NewSessionStoreServiceClient(cc),
			log: o.logger,
		},
		namespace: o.namespace,
	}
	if o.lazy {
		return c, nil
	}
	if err := waitReady(ctx, cc); err != nil {
		_ = cc.Close()
		return nil, errorf("client: dial %s: %w", addr, err)
	}
	return c, nil
}

// dialTarget turns a sessiond address into a gRPC target. A bare host:port
// goes through the passthrough resolver so that it is dialled as given.
func dialTarget(addr string) (string, error) {
	switch {
	case addr == "":
		return "", errorf("client: empty address: %w", ErrInvalid)
	case strings.HasPrefix(addr, "unix:"), strings.HasPrefix(addr, "unix-abstract:"),
		strings.HasPrefix(addr, "passthrough:"), strings.HasPrefix(addr, "dns:"):
		return addr, nil
	}
	return "passthrough:///" + addr, nil
}

// waitReady connects cc and waits until it is ready, its first attempt
// fails, or ctx ends.
func waitReady(ctx context.Context, cc *grpc.ClientConn) error {
	cc.Connect()
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return errorf("%w: connection %s", ErrUnavailable, s)
		}
		if !cc.WaitForStateChange(ctx, s) {
			return errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
	}
}

// In returns a Client that uses namespace ns for calls whose Ref does not
// name one, and for Create, List and Search. It shares c's connection:
// closing either closes both.
func (c *Client) In(ns string) *Client {
	return &Client{conn: c.conn, namespace: ns}
}

// Namespace returns the namespace c's calls use by default.
func (c *Client) Namespace() string { return c.namespace }

// RPC returns the generated stub on c's connection, for what the SDK does
// not wrap. Its errors are not mapped.
func (c *Client) RPC() sessiondv1.SessionStoreServiceClient { return c.conn.rpc }

// Close closes the connection. Calls in progress fail; later calls return
// ErrClosed. A second Close returns nil. Handles opened from c should be
// closed first, or their unsaved messages cannot be saved.
func (c *Client) Close() error {
	if !c.conn.closed.CompareAndSwap(false, true) {
		return nil
	}
	if err := c.conn.cc.Close(); err != nil {
		return errorf("client: close: %w", err)
	}
	return nil
}

// check returns ErrClosed once the connection is closed.
func (c *Client) check(op rpc) error {
	if c.conn.closed.Load() {
		return errorf("client: %s: %w", op, ErrClosed)
	}
	return nil
}

// Ref names one session: by id or by alias, in the client's namespace unless
// In names another.
type Ref struct {
	id, alias string
	ns        string
	nsSet     bool
}

// ID refers to a session by its UUID.
func ID(id string) Ref { return Ref{id: id} }

// Alias refers to a session by its alias.
func Alias(alias string) Ref { return Ref{alias: alias} }

// ParseRef refers to a session by s, which is an id when it is shaped like a
// UUID and an alias otherwise (an alias never looks like a UUID), as in a
// REPL's --session ID|ALIAS flag.
func ParseRef(s string) Ref {
	if looksLikeUUID(s) {
		return ID(strings.ToLower(s))
	}
	return Alias(s)
}

// In returns r in namespace ns, whatever the client's namespace.
func (r Ref) In(ns string) Ref {
	r.ns, r.nsSet = ns, true
	return r
}

// ID returns the session id r names, or "".
func (r Ref) ID() string { return r.id }

// Alias returns the alias r names, or "".
func (r Ref) Alias() string { return r.alias }

// String returns the id or the alias.
func (r Ref) String() string { return cmp.Or(r.id, r.alias) }

// namespace returns the namespace r is in, for a client whose default is def.
func (r Ref) namespace(def string) string {
	if r.nsSet {
		return r.ns
	}
	return def
}

func (c *Client) ref(r Ref) *sessiondv1.SessionRef {
	pr := &sessiondv1.SessionRef{Namespace: r.namespace(c.namespace)}
	if r.id != "" {
		pr.Key = &sessiondv1.SessionRef_Id{Id: r.id}
	} else {
		pr.Key = &sessiondv1.SessionRef_Alias{Alias: r.alias}
	}
	return pr
}

// looksLikeUUID reports whether s has the 8-4-4-4-12 hex shape of a UUID.
func looksLikeUUID(s string) bool { return len(s) == 36 && uuid.Validate(s) == nil }
