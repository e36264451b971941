package httpapi

import (
	"context"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// PeerServerOptions return interceptors for the gRPC server that serves
// the handler's calls (and nothing else): they make the HTTP client's
// address, carried as PeerMetadataKey, the call's peer, so that call logs
// and refusals name the real client instead of the in-process connection.
// Give them before the server's other interceptors (they use
// grpc.UnaryInterceptor and grpc.StreamInterceptor, which run first).
// Never install them on a server that clients reach directly: they would
// let a client name its own address.
func PeerServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			return handler(httpPeer(ctx), req)
		}),
		grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			return handler(srv, peerStream{ss, httpPeer(ss.Context())})
		}),
	}
}

// peerName names an HTTP client: its address, and the subject of its
// client certificate under mutual TLS, in printable ASCII (metadata allows
// no other).
func peerName(r *http.Request) string {
	name := r.RemoteAddr + " (http)"
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		name = r.RemoteAddr + " (http, client certificate " + r.TLS.PeerCertificates[0].Subject.String() + ")"
	}
	return strings.Map(func(c rune) rune {
		if c < 0x20 || c > 0x7e {
			return '?'
		}
		return c
	}, name)
}

// httpAddr is an HTTP client, as peerName names it.
type httpAddr string

func (a httpAddr) Network() string { return "http" }
func (a httpAddr) String() string  { return string(a) }

func httpPeer(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(PeerMetadataKey); len(v) == 1 && v[0] != "" {
		return peer.NewContext(ctx, &peer.Peer{Addr: httpAddr(v[0])})
	}
	return ctx
}

type peerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s peerStream) Context() context.Context { return s.ctx }
