package main

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// quietConns closes, when an http.Server stops, its connections on which
// no request has begun. Shutdown waits for each of those until it is 5 s
// old, since its client may yet send one, so a client that only opened a
// connection (a spare one its pool dialled, a port check) would hold the
// daemon's stop that long. Such a connection has read no byte, so closing
// it cuts nothing short.
type quietConns struct {
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	stopping bool
}

// track is the server's ConnState hook.
func (q *quietConns) track(c net.Conn, st http.ConnState) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case st != http.StateNew:
		delete(q.conns, c)
	case q.stopping:
		_ = c.Close()
	default:
		if q.conns == nil {
			q.conns = map[net.Conn]struct{}{}
		}
		q.conns[c] = struct{}{}
	}
}

// shutdown is srv.Shutdown(ctx) with the quiet connections closed at once,
// and any accepted meanwhile as it comes.
func (q *quietConns) shutdown(ctx context.Context, srv *http.Server) error {
	q.mu.Lock()
	q.stopping = true
	for c := range q.conns {
		_ = c.Close()
	}
	clear(q.conns)
	q.mu.Unlock()
	return srv.Shutdown(ctx)
}
