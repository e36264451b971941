package main

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// drainingHealth is grpc-go's health server whose Watch streams end when
// the daemon drains. grpc-go's own Watch runs until the client goes away,
// and grpc.Server.GracefulStop waits for every stream, so one client with
// health checking on (which uses Watch) would hold every shutdown until
// --shutdown-timeout and then cut off the calls still in flight.
type drainingHealth struct {
	*health.Server
	drained <-chan struct{} // closed after Server.Shutdown
}

// Watch is health.Server.Watch until the drain: then the watcher is told
// NOT_SERVING (if the inner Watch has not already sent it) and the stream
// ends UNAVAILABLE, so that the client looks elsewhere.
func (h drainingHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-h.drained:
			cancel()
		case <-ctx.Done():
		}
	}()
	ws := &watchStream{Health_WatchServer: stream, ctx: ctx}
	err := h.Server.Watch(req, ws)
	select {
	case <-h.drained:
	default:
		return err
	}
	if ws.lastStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		// The inner Watch has returned, so this is the stream's only sender.
		_ = stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
	}
	return status.Error(codes.Unavailable, "server is shutting down")
}

// watchStream gives the inner Watch a context that ends at the drain, and
// remembers the last status it sent.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context

	mu   sync.Mutex
	last healthpb.HealthCheckResponse_ServingStatus // UNKNOWN until a Send
}

func (s *watchStream) Context() context.Context { return s.ctx }

func (s *watchStream) Send(r *healthpb.HealthCheckResponse) error {
	err := s.Health_WatchServer.Send(r)
	if err == nil {
		s.mu.Lock()
		s.last = r.GetStatus()
		s.mu.Unlock()
	}
	return err
}

func (s *watchStream) lastStatus() healthpb.HealthCheckResponse_ServingStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}
