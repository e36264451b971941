package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// Watching a session as Server-Sent Events.
//
// GET .../events answers text/event-stream: one event per change, its id
// the session's revision after the change, its event name the change
// ("appended", "replaced", "updated", "deleted") and its data the
// WatchSessionResponse as one line of JSON:
//
//	id: 3
//	event: appended
//	data: {"type":"EVENT_TYPE_APPENDED","revision":"3","messages":[...],"session":{...}}
//
// ?from_revision=N sends every change after revision N (0 or none: from
// now). A reconnecting client sends the id of the last event it saw as the
// Last-Event-ID header (browsers' EventSource does so by itself), which wins
// over from_revision, so no change is missed or sent twice. A refused watch
// (a session that does not exist, a revision out of range, a missing token)
// answers the error's HTTP status and JSON body like every other route; an
// error after the stream started (OUT_OF_RANGE for a watcher that fell
// behind: reload, then watch again; UNAVAILABLE when the daemon shuts down)
// is a last event named "error" with the status as its data. After a
// "deleted" event the stream ends. A comment line is sent every
// KeepAliveInterval so that proxies keep an idle stream open, and a client
// that takes nothing for a minute is cut off.

// eventPatterns are the watch routes, beside the session routes.
var eventPatterns = []string{
	"/v1/sessions/{id}/events",
	"/v1/namespaces/{namespace}/sessions/{id}/events",
	"/v1/aliases/{alias}/events",
	"/v1/namespaces/{namespace}/aliases/{alias}/events",
}

// KeepAliveInterval is how often an idle event stream gets a comment line.
var KeepAliveInterval = 15 * time.Second

// StalledWriteTimeout ends an event stream whose client has not taken an
// event (or keep-alive) for this long.
var StalledWriteTimeout = time.Minute

const watchMethod = "/sessiond.v1.SessionStoreService/WatchSession"

// eventNames name the events of each type.
var eventNames = map[sessiondv1.EventType]string{
	sessiondv1.EventType_EVENT_TYPE_APPENDED: "appended",
	sessiondv1.EventType_EVENT_TYPE_REPLACED: "replaced",
	sessiondv1.EventType_EVENT_TYPE_UPDATED:  "updated",
	sessiondv1.EventType_EVENT_TYPE_DELETED:  "deleted",
	sessiondv1.EventType_EVENT_TYPE_DELTA:    "delta",
	sessiondv1.EventType_EVENT_TYPE_FINISHED: "finished",
}

// watchRequest reads the request's session and starting revision.
func watchRequest(r *http.Request) (*sessiondv1.WatchSessionRequest, error) {
	q := r.URL.Query()
	ref := &sessiondv1.SessionRef{Namespace: r.PathValue("namespace")}
	if ref.Namespace == "" {
		ref.Namespace = q.Get("ref.namespace")
	}
	if id := r.PathValue("id"); id != "" {
		ref.Key = &sessiondv1.SessionRef_Id{Id: id}
	} else {
		ref.Key = &sessiondv1.SessionRef_Alias{Alias: r.PathValue("alias")}
	}
	req := &sessiondv1.WatchSessionRequest{Ref: ref}
	if v := q.Get("from_revision"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "from_revision: %q is not a revision (a whole number from 0)", v)
		}
		req.FromRevision = n
	}
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "Last-Event-ID: %q is not a revision (the id of an event of this stream)", v)
		}
		req.FromRevision = n
	}
	return req, nil
}

// events serves a watch as Server-Sent Events.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	fail := func(err error) { h.writeError(w, r, err) }
	req, err := watchRequest(r)
	if err != nil {
		fail(err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		fail(status.Error(codes.Internal, "this connection cannot stream events"))
		return
	}
	ctx, err := runtime.AnnotateContext(r.Context(), h.gateway, r, watchMethod, runtime.WithHTTPPathPattern(r.Pattern))
	if err != nil {
		fail(err)
		return
	}
	stream, err := h.client.WatchSession(ctx, req)
	if err != nil {
		fail(err)
		return
	}
	// The service sends its headers once the watch is in place; a watch
	// refused at once ends without them, and Recv tells why.
	md, err := stream.Header()
	if err == nil && md == nil {
		_, err = stream.Recv()
		if err == nil || errors.Is(err, io.EOF) {
			err = status.Error(codes.Internal, "the watch ended before it started")
		}
	}
	if err != nil {
		fail(err)
		return
	}

	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	if req.FromRevision == 0 {
		_, _ = io.WriteString(w, ": watching from now\n\n")
	} else {
		_, _ = fmt.Fprintf(w, ": watching from revision %d\n\n", req.FromRevision)
	}
	flusher.Flush()

	type result struct {
		ev  *sessiondv1.WatchSessionResponse
		err error
	}
	// Recv blocks; a goroutine feeds it to the loop, which also sends
	// keep-alives. It ends when the stream does (the request's context
	// ending cancels the call).
	recv := make(chan result, 1)
	go func() {
		for {
			ev, err := stream.Recv()
			select {
			case recv <- result{ev, err}:
			case <-r.Context().Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	keepAlive := time.NewTicker(KeepAliveInterval)
	defer keepAlive.Stop()
	var buf bytes.Buffer
	for {
		buf.Reset()
		last := false
		select {
		case <-r.Context().Done():
			return
		case <-keepAlive.C:
			buf.WriteString(": keep-alive\n\n")
		case res := <-recv:
			switch {
			case errors.Is(res.err, io.EOF):
				return
			case res.err != nil:
				writeEvent(&buf, "", "error", status.Convert(res.err).Proto())
				last = true
			default:
				writeEvent(&buf, strconv.FormatUint(res.ev.GetRevision(), 10), eventNames[res.ev.GetType()], res.ev)
			}
		}
		// A client that stops reading must not hold the stream (and its
		// goroutines) forever: a write that cannot finish in
		// StalledWriteTimeout ends it.
		_ = rc.SetWriteDeadline(time.Now().Add(StalledWriteTimeout))
		_, err := w.Write(buf.Bytes())
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			h.log.Debug("event stream: client gone or not reading", zap.String("path", r.URL.Path), zap.Error(err))
			return
		}
		if last {
			return
		}
	}
}

// writeEvent writes one event; protojson writes one line (no newlines).
func writeEvent(buf *bytes.Buffer, id, name string, m proto.Message) {
	data, err := protojson.Marshal(m)
	if err != nil {
		data = []byte(`{"code":13,"message":"cannot encode the event"}`)
		name = "error"
	}
	if id != "" {
		buf.WriteString("id: " + id + "\n")
	}
	if name != "" {
		buf.WriteString("event: " + name + "\n")
	}
	buf.WriteString("data: ")
	buf.Write(data)
	buf.WriteString("\n\n")
}
