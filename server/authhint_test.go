package server

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/auth"
)

// httpClientAddr is a peer address as the HTTP API names its clients.
type httpClientAddr string

func (a httpClientAddr) Network() string { return "http" }
func (a httpClientAddr) String() string  { return string(a) }

// An UNAUTHENTICATED call is told how to send a token the way its caller
// can: metadata over gRPC, the Authorization header over the HTTP API.
func TestUnauthenticatedHintNamesTheTransport(t *testing.T) {
	set, err := auth.Parse([]byte(`{"tokens": []}`))
	if err != nil {
		t.Fatal(err)
	}
	a := NewAuthorizer(set, nil)
	req := &sessiondv1.GetSessionRequest{Ref: &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Alias{Alias: "demo"}}}
	info := &grpc.UnaryServerInfo{FullMethod: servicePrefix + "GetSession"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	grpcPeer := &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}}
	httpPeer := &peer.Peer{Addr: httpClientAddr("127.0.0.1:50000 (http)")}
	for _, tc := range []struct {
		name   string
		peer   *peer.Peer
		md     metadata.MD
		want   string
		reject string
	}{
		{"grpc without token", grpcPeer, nil, `no authorization metadata; send "authorization: Bearer <token>" metadata`, "header"},
		{"grpc with two", grpcPeer, metadata.Pairs("authorization", "Bearer a", "authorization", "Bearer b"), `more than one authorization value; send "authorization: Bearer <token>" metadata`, "header"},
		{"http without token", httpPeer, nil, `no Authorization header; send the header "Authorization: Bearer <token>"`, "metadata"},
		{"http with two", httpPeer, metadata.Pairs("authorization", "Bearer a", "authorization", "Bearer b"), `more than one Authorization header; send the header "Authorization: Bearer <token>"`, "metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := peer.NewContext(metadata.NewIncomingContext(t.Context(), tc.md), tc.peer)
			_, err := a.unary(ctx, req, info, handler)
			if status.Code(err) != codes.Unauthenticated || status.Convert(err).Message() != tc.want {
				t.Errorf("got %v, want UNAUTHENTICATED %q", err, tc.want)
			}
			if strings.Contains(status.Convert(err).Message(), tc.reject) {
				t.Errorf("%q speaks of %s, which this caller cannot send", status.Convert(err).Message(), tc.reject)
			}
		})
	}
}
