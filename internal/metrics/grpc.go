package metrics

import (
	"context"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
)

// serverMetrics counts and times gRPC calls under the names, labels and
// help of go-grpc-middleware's Prometheus provider, through that module's
// interceptors. The provider looks up five series by their label values
// on every call; here each registered method's series are looked up once,
// when the server's services are known (register), which takes most of
// the instrumentation's cost off every call.
type serverMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	seconds                          *prometheus.HistogramVec

	// methods holds every registered method's series, by service and
	// method name. Filled by register before the server serves, then only
	// read.
	methods map[methodKey]*methodSeries
}

type methodKey struct{ service, method string }

// methodSeries is one method's series; it is the method's calls'
// interceptors.Reporter.
type methodSeries struct {
	started, received, sent prometheus.Counter
	seconds                 prometheus.Observer
	handled                 []prometheus.Counter // by codes.Code; nil: looked up per call
	handledVec              *prometheus.CounterVec
	labels                  [3]string // type, service, method
}

func newServerMetrics() *serverMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	counter := func(name, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	return &serverMetrics{
		started:  counter("grpc_server_started_total", "Total number of RPCs started on the server.", labels),
		handled:  counter("grpc_server_handled_total", "Total number of RPCs completed on the server, regardless of success or failure.", append(labels[:3:3], "grpc_code")),
		received: counter("grpc_server_msg_received_total", "Total number of RPC stream messages received on the server.", labels),
		sent:     counter("grpc_server_msg_sent_total", "Total number of gRPC stream messages sent by the server.", labels),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: latencyBuckets,
		}, labels),
		methods: map[methodKey]*methodSeries{},
	}
}

func (m *serverMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range []prometheus.Collector{m.started, m.handled, m.received, m.sent, m.seconds} {
		c.Describe(ch)
	}
}

func (m *serverMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range []prometheus.Collector{m.started, m.handled, m.received, m.sent, m.seconds} {
		c.Collect(ch)
	}
}

// register creates the series of every method of s's services at zero,
// every code's included, so that a query sees a method before its first
// call, and keeps them for the interceptors.
func (m *serverMetrics) register(s reflection.ServiceInfoProvider) {
	for service, info := range s.GetServiceInfo() {
		for _, mi := range info.Methods {
			typ := interceptors.Unary
			switch {
			case mi.IsClientStream && mi.IsServerStream:
				typ = interceptors.BidiStream
			case mi.IsClientStream:
				typ = interceptors.ClientStream
			case mi.IsServerStream:
				typ = interceptors.ServerStream
			}
			ms := m.series(typ, service, mi.Name)
			ms.handled = make([]prometheus.Counter, len(interceptors.AllCodes))
			for _, c := range interceptors.AllCodes {
				ms.handled[c] = m.handled.WithLabelValues(string(typ), service, mi.Name, c.String())
			}
			m.methods[methodKey{service, mi.Name}] = ms
		}
	}
}

// series looks up one method's series, but for its codes'.
func (m *serverMetrics) series(typ interceptors.GRPCType, service, method string) *methodSeries {
	t := string(typ)
	return &methodSeries{
		started:    m.started.WithLabelValues(t, service, method),
		received:   m.received.WithLabelValues(t, service, method),
		sent:       m.sent.WithLabelValues(t, service, method),
		seconds:    m.seconds.WithLabelValues(t, service, method),
		handledVec: m.handled,
		labels:     [3]string{t, service, method},
	}
}

// ServerReporter implements interceptors.ServerReportable.
func (m *serverMetrics) ServerReporter(ctx context.Context, c interceptors.CallMeta) (interceptors.Reporter, context.Context) {
	s, ok := m.methods[methodKey{c.Service, c.Method}]
	if !ok { // not registered when register ran: looked up per call
		s = m.series(c.Typ, c.Service, c.Method)
	}
	s.started.Inc()
	return s, ctx
}

func (s *methodSeries) PostCall(err error, d time.Duration) {
	code := grpcprom.FromError(err).Code()
	if int(code) < len(s.handled) {
		s.handled[code].Inc()
	} else {
		s.handledVec.WithLabelValues(s.labels[0], s.labels[1], s.labels[2], code.String()).Inc()
	}
	s.seconds.Observe(d.Seconds())
}

func (s *methodSeries) PostMsgSend(_ any, err error, _ time.Duration) {
	if err == nil {
		s.sent.Inc()
	}
}

func (s *methodSeries) PostMsgReceive(_ any, err error, _ time.Duration) {
	if err == nil {
		s.received.Inc()
	}
}

// interceptors returns the server options that report every call.
func (m *serverMetrics) interceptors() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(interceptors.UnaryServerInterceptor(m)),
		grpc.ChainStreamInterceptor(interceptors.StreamServerInterceptor(m)),
	}
}
