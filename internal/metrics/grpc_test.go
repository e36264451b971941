package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// services is a server's service info.
type services map[string]grpc.ServiceInfo

func (s services) GetServiceInfo() map[string]grpc.ServiceInfo { return s }

var testServices = services{"t.v1.S": {Methods: []grpc.MethodInfo{
	{Name: "Append"},
	{Name: "List", IsServerStream: true},
	{Name: "Save", IsClientStream: true},
	{Name: "Watch", IsClientStream: true, IsServerStream: true},
}}}

type fakeStream struct{ grpc.ServerStream }

func (fakeStream) Context() context.Context { return context.Background() }
func (fakeStream) SendMsg(any) error        { return nil }
func (fakeStream) RecvMsg(any) error        { return nil }

// calls makes the same calls through unary and stream.
func calls(unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor) {
	for _, err := range []error{nil, status.Error(codes.NotFound, "no"), context.Canceled, errors.New("plain"), status.Error(codes.Code(40), "odd")} {
		_, _ = unary(context.Background(), "req", &grpc.UnaryServerInfo{FullMethod: "/t.v1.S/Append"}, func(context.Context, any) (any, error) {
			return "resp", err
		})
	}
	_ = stream(nil, fakeStream{}, &grpc.StreamServerInfo{FullMethod: "/t.v1.S/List", IsServerStream: true}, func(_ any, ss grpc.ServerStream) error {
		_ = ss.RecvMsg(new(string))
		_ = ss.SendMsg("a")
		_ = ss.SendMsg("b")
		return status.Error(codes.Aborted, "x")
	})
}

// TestSeriesAsTheProvider: after the same calls, the series are those of
// go-grpc-middleware's Prometheus provider, value for value (the
// histograms' counts; their buckets and sums hold times).
func TestSeriesAsTheProvider(t *testing.T) {
	provider := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(latencyBuckets)))
	provider.InitializeMetrics(testServices)
	calls(provider.UnaryServerInterceptor(), provider.StreamServerInterceptor())
	ours := newServerMetrics()
	ours.register(testServices)
	calls(interceptors.UnaryServerInterceptor(ours), interceptors.StreamServerInterceptor(ours))

	want, got := seriesText(t, provider), seriesText(t, ours)
	if want != got {
		t.Fatalf("series differ from the provider's:\n--- provider\n%s\n--- ours\n%s", want, got)
	}
	for _, s := range []string{
		`grpc_server_handled_total{grpc_code="Canceled",grpc_method="Append",grpc_service="t.v1.S",grpc_type="unary"} 1`,
		`grpc_server_handled_total{grpc_code="Code(40)",grpc_method="Append",grpc_service="t.v1.S",grpc_type="unary"} 1`,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Watch",grpc_service="t.v1.S",grpc_type="bidi_stream"} 0`,
		`grpc_server_msg_sent_total{grpc_method="List",grpc_service="t.v1.S",grpc_type="server_stream"} 2`,
		`grpc_server_handling_seconds_count{grpc_method="Append",grpc_service="t.v1.S",grpc_type="unary"} 5`,
	} {
		if !strings.Contains(got, s+"\n") {
			t.Errorf("no %s in:\n%s", s, got)
		}
	}

	// A method the server did not have when registered is counted all
	// the same.
	_, _ = interceptors.UnaryServerInterceptor(ours)(context.Background(), "req", &grpc.UnaryServerInfo{FullMethod: "/t.v1.S/Later"}, func(context.Context, any) (any, error) {
		return nil, status.Error(codes.Internal, "x")
	})
	if s := `grpc_server_handled_total{grpc_code="Internal",grpc_method="Later",grpc_service="t.v1.S",grpc_type="unary"} 1`; !strings.Contains(seriesText(t, ours), s) {
		t.Errorf("a method not registered: no %s", s)
	}
}

// seriesText returns c's series in the text format, but the histograms'
// buckets and sums.
func seriesText(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&out, mf); err != nil {
			t.Fatal(err)
		}
	}
	var keep []string
	for line := range strings.Lines(out.String()) {
		if !strings.Contains(line, "_bucket{") && !strings.Contains(line, "_sum{") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}

// BenchmarkUnaryReporting is one unary call's reporting: by the provider,
// which looks its series up at every call, and by serverMetrics.
func BenchmarkUnaryReporting(b *testing.B) {
	provider := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(latencyBuckets)))
	provider.InitializeMetrics(testServices)
	ours := newServerMetrics()
	ours.register(testServices)
	for _, c := range []struct {
		name  string
		unary grpc.UnaryServerInterceptor
	}{{"provider", provider.UnaryServerInterceptor()}, {"resolved", interceptors.UnaryServerInterceptor(ours)}} {
		b.Run(c.name, func(b *testing.B) {
			info := &grpc.UnaryServerInfo{FullMethod: "/t.v1.S/Append"}
			handler := func(context.Context, any) (any, error) { return "resp", nil }
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.unary(context.Background(), "req", info, handler)
			}
		})
	}
}
