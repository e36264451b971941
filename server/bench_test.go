package server

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/storage"
	"github.com/sessiond/sessiond/storage/file"
)

// The loopback benchmarks compare a durable one-message append with the
// gRPC round-trip floor (a health check) over real TCP on 127.0.0.1, as a
// daemon serves them. Run them in one go so the ratio is from one run:
//
//	go test -run '^$' -bench Loopback -benchtime 2000x ./server/

// loopback serves a Server on a file store in a temp dir, plus the health
// service, on 127.0.0.1, and returns a connection to it.
func loopback(b *testing.B) *grpc.ClientConn {
	b.Helper()
	st, err := file.Open(b.Context(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	srv := New(st)
	gs := grpc.NewServer(srv.ServerOptions()...)
	srv.Register(gs)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		_ = st.Close()
	})
	return conn
}

// timed runs op b.N times (after a warm-up) and reports the p50 and p99
// latencies.
func timed(b *testing.B, op func(i int) error) {
	b.Helper()
	for i := 0; i < 50; i++ { // warm up the connection and the store
		if err := op(-1 - i); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func BenchmarkAppendLoopback(b *testing.B) {
	conn := loopback(b)
	c := sessiondv1.NewSessionStoreServiceClient(conn)
	ctx := b.Context()
	resp, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	ref := byID(resp.GetSession().GetId())
	content := strings.Repeat("x", 1024)
	timed(b, func(i int) error {
		_, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{
			Ref:      ref,
			Messages: []*sessiondv1.Message{user(fmt.Sprintf("m%d", i), content)},
		})
		return err
	})
}

func BenchmarkHealthLoopback(b *testing.B) {
	conn := loopback(b)
	c := healthpb.NewHealthClient(conn)
	ctx := b.Context()
	timed(b, func(int) error {
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	})
}

// BenchmarkAppendDirect is the same append straight on the store, without
// gRPC or the server, to separate the server's share of the loopback figure.
func BenchmarkAppendDirect(b *testing.B) {
	st, err := file.Open(b.Context(), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	ctx := b.Context()
	sess, err := st.Create(ctx, storage.CreateRequest{Alias: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	ref := storage.Ref{ID: sess.ID}
	content := strings.Repeat("x", 1024)
	timed(b, func(i int) error {
		_, err := st.Append(ctx, storage.AppendRequest{Ref: ref, Messages: []*sessiondv1.Message{user(fmt.Sprintf("m%d", i), content)}})
		return err
	})
}
