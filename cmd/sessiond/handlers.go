package main

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
)

// runningHandlers counts the gRPC handlers running. At shutdown, once none
// is left, GracefulStop can still wait forever on a stream whose client
// stopped reading: its final status is queued behind data the client will
// never take, and only Stop ends such a connection.
type runningHandlers struct{ n atomic.Int64 }

func (h *runningHandlers) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			h.n.Add(1)
			defer h.n.Add(-1)
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			h.n.Add(1)
			defer h.n.Add(-1)
			return handler(srv, ss)
		}),
	}
}

// idle returns a channel closed once no handler has run for grace, checked
// every grace/10, until stop is closed.
func (h *runningHandlers) idle(grace time.Duration, stop <-chan struct{}) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		t := time.NewTicker(grace / 10)
		defer t.Stop()
		var since time.Time
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				switch {
				case h.n.Load() > 0:
					since = time.Time{}
				case since.IsZero():
					since = now
				case now.Sub(since) >= grace:
					close(ch)
					return
				}
			}
		}
	}()
	return ch
}
