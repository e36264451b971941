package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/syncbuf"
	"github.com/sessiond/sessiond/internal/testcerts"
)

// The tests in this file drive the HTTP side of the real daemon
// (--http-listen): the JSON routes, their error statuses, tokens, TLS, the
// event stream of a watch and its resumption, and docs/http.md's curl
// walkthrough.

// httpAPI calls a daemon's HTTP side.
type httpAPI struct {
	base   string // http://host:port or https://host:port
	client *http.Client
	token  string // sent as "Authorization: Bearer <token>" when set
}

// startHTTPDaemon starts a daemon with --http-listen 127.0.0.1:0 and the
// extra arguments, and returns it with an HTTP client for it.
func startHTTPDaemon(t *testing.T, dataDir string, extraArgs ...string) (*daemon, *httpAPI) {
	t.Helper()
	d := startDaemon(t, dataDir, append([]string{"--http-listen", "127.0.0.1:0"}, extraArgs...)...)
	return d, &httpAPI{base: "http://" + httpAddr(t, d), client: &http.Client{Timeout: time.Minute}}
}

// httpAddr is the address of the daemon's HTTP listener, from its log.
func httpAddr(t *testing.T, d *daemon) string {
	t.Helper()
	for _, l := range d.logLines() {
		if l["msg"] == "serving JSON over HTTP" {
			if a, ok := l["http_addr"].(string); ok {
				return a
			}
		}
	}
	t.Fatalf("no \"serving JSON over HTTP\" line with http_addr in the log:\n%s", d.Logs())
	return ""
}

// with returns a copy of h that sends token.
func (h *httpAPI) with(token string) *httpAPI {
	c := *h
	c.token = token
	return &c
}

// do sends a request (body "" for none) and returns the response, its body
// read.
func (h *httpAPI) do(t *testing.T, method, path, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, h.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// call sends a request that must answer 200 and decodes its JSON body
// into out (proto3 JSON), unless out is nil.
func (h *httpAPI) call(t *testing.T, method, path, body string, out proto.Message) {
	t.Helper()
	resp, b := h.do(t, method, path, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: status %d, want 200; body %s", method, path, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	if out != nil {
		if err := protojson.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: body is not a %T: %v\n%s", method, path, out, err, b)
		}
	}
}

// stream sends a request to a server-streaming route that must answer 200
// and decodes every {"result": ...} line into a new T.
func stream[T any, P interface {
	*T
	proto.Message
}](t *testing.T, h *httpAPI, path string) []P {
	t.Helper()
	resp, b := h.do(t, http.MethodGet, path, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d, want 200; body %s", path, resp.StatusCode, b)
	}
	var out []P
	for line := range bytes.Lines(b) {
		var frame struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(line, &frame); err != nil || frame.Error != nil || frame.Result == nil {
			t.Fatalf("GET %s: line %q is not a {\"result\": ...} frame (%v)", path, line, err)
		}
		p := P(new(T))
		if err := protojson.Unmarshal(frame.Result, p); err != nil {
			t.Fatalf("GET %s: frame is not a %T: %v\n%s", path, p, err, frame.Result)
		}
		out = append(out, p)
	}
	return out
}

// httpError is the JSON body of an error.
type httpError struct {
	Code    codes.Code `json:"code"`
	Message string     `json:"message"`
	Details []struct {
		Type            string `json:"@type"`
		FieldViolations []struct {
			Field string `json:"field"`
		} `json:"fieldViolations"`
	} `json:"details"`
}

// fail sends a request that must answer status with a JSON error body of
// code whose message names at least one of mentions (if any).
func (h *httpAPI) fail(t *testing.T, method, path, body string, status int, code codes.Code, mentions ...string) httpError {
	t.Helper()
	resp, b := h.do(t, method, path, body)
	return wantHTTPError(t, method+" "+path, resp, b, status, code, mentions...)
}

func wantHTTPError(t *testing.T, what string, resp *http.Response, b []byte, status int, code codes.Code, mentions ...string) httpError {
	t.Helper()
	var e httpError
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("%s: status %d, body is not a JSON status: %v\n%s", what, resp.StatusCode, err, b)
	}
	if resp.StatusCode != status || e.Code != code {
		t.Fatalf("%s: status %d code %v (%s), want %d %v", what, resp.StatusCode, e.Code, e.Message, status, code)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: error Content-Type %q, want application/json", what, ct)
	}
	if len(mentions) > 0 {
		found := false
		for _, m := range mentions {
			found = found || strings.Contains(strings.ToLower(e.Message), strings.ToLower(m))
		}
		if !found {
			t.Errorf("%s: message %q names none of %q", what, e.Message, mentions)
		}
	}
	return e
}

// TestHTTPRoutes walks every JSON route of the HTTP side against the real
// daemon, by id and by alias, in the default namespace and another one,
// and checks through gRPC that what HTTP wrote is what is stored.
func TestHTTPRoutes(t *testing.T) {
	d, h := startHTTPDaemon(t, t.TempDir(), "--log-level", "debug")
	ctx := testContext(t, 2*time.Minute)
	c := d.client(t)

	// Create, answered with the session and its new UUID.
	var cr sessiondv1.CreateSessionResponse
	h.call(t, "POST", "/v1/sessions", `{"alias": "weather", "title": "Weather", "labels": {"team": "a"}}`, &cr)
	id := cr.GetSession().GetId()
	if u, err := uuid.Parse(id); err != nil || u.String() != id || cr.GetSession().GetRevision() != 1 {
		t.Fatalf("create answered id %q (%v), revision %d; want a lowercase UUID, revision 1", id, err, cr.GetSession().GetRevision())
	}
	h.fail(t, "POST", "/v1/sessions", `{"alias": "weather"}`, http.StatusConflict, codes.AlreadyExists, "alias")
	var other sessiondv1.CreateSessionResponse
	h.call(t, "POST", "/v1/namespaces/ns1/sessions", `{"alias": "weather", "title": "Other namespace"}`, &other)
	if other.GetSession().GetNamespace() != "ns1" {
		t.Errorf("create under /v1/namespaces/ns1: namespace %q", other.GetSession().GetNamespace())
	}

	// Get by id and by alias, in each namespace; an id is found only in its own.
	for _, p := range []string{"/v1/sessions/" + id, "/v1/aliases/weather", "/v1/sessions/" + id + "?ref.namespace="} {
		var g sessiondv1.GetSessionResponse
		h.call(t, "GET", p, "", &g)
		if g.GetSession().GetId() != id || g.GetSession().GetTitle() != "Weather" {
			t.Errorf("GET %s: %v, want session %s", p, g.GetSession(), id)
		}
	}
	for _, p := range []string{"/v1/namespaces/ns1/aliases/weather", "/v1/namespaces/ns1/sessions/" + other.GetSession().GetId(), "/v1/aliases/weather?ref.namespace=ns1"} {
		var g sessiondv1.GetSessionResponse
		h.call(t, "GET", p, "", &g)
		if g.GetSession().GetId() != other.GetSession().GetId() {
			t.Errorf("GET %s: %v, want session %s", p, g.GetSession(), other.GetSession().GetId())
		}
	}
	h.fail(t, "GET", "/v1/namespaces/ns1/sessions/"+id, "", http.StatusNotFound, codes.NotFound)
	h.fail(t, "GET", "/v1/aliases/nobody", "", http.StatusNotFound, codes.NotFound, "nobody")

	// Append (tool-call arguments are kept byte for byte), a retry that
	// changes nothing, and a stale expected_revision.
	const args = `{ "city":"Paris",  "units" : "metric" }`
	appendBody := fmt.Sprintf(`{"messages": [
		{"id": "u1", "role": "ROLE_USER", "content": "Weather in Paris?"},
		{"id": "a1", "role": "ROLE_ASSISTANT", "toolCalls": [{"id": "call_1", "name": "weather", "arguments": %q}]},
		{"id": "t1", "role": "ROLE_TOOL", "toolCallId": "call_1", "content": "18 C"}]}`, args)
	for range 2 {
		var ar sessiondv1.AppendMessagesResponse
		h.call(t, "POST", "/v1/sessions/"+id+"/messages", appendBody, &ar)
		if ar.GetRevision() != 2 || ar.GetMessageCount() != 3 {
			t.Fatalf("append: revision %d, %d messages; want 2, 3", ar.GetRevision(), ar.GetMessageCount())
		}
	}
	h.fail(t, "POST", "/v1/aliases/weather/messages", `{"messages": [{"id": "u2", "role": "ROLE_USER", "content": "x"}], "expectedRevision": "1"}`,
		http.StatusConflict, codes.Aborted)

	// Load: whole, a window, the tail; then the same through gRPC.
	frames := stream[sessiondv1.LoadSessionResponse](t, h, "/v1/aliases/weather/messages")
	var msgs []*sessiondv1.Message
	for _, f := range frames {
		msgs = append(msgs, f.GetMessages()...)
	}
	if len(frames) == 0 || frames[0].GetSession().GetId() != id || len(msgs) != 3 || msgs[1].GetToolCalls()[0].GetArguments() != args {
		t.Fatalf("load: %d frames, %d messages (%v); want session %s, 3 messages, arguments %q", len(frames), len(msgs), msgs, id, args)
	}
	for q, want := range map[string]string{"offset=1&limit=1": "a1", "tail=true&limit=1": "t1"} {
		f := stream[sessiondv1.LoadSessionResponse](t, h, "/v1/sessions/"+id+"/messages?"+q)
		if len(f) != 1 || len(f[0].GetMessages()) != 1 || f[0].GetMessages()[0].GetId() != want {
			t.Errorf("load ?%s: %v, want only message %s", q, f, want)
		}
	}
	if _, got := mustLoad(t, ctx, c, &sessiondv1.LoadSessionRequest{Ref: byID("", id)}); len(got) != 3 || got[1].GetToolCalls()[0].GetArguments() != args {
		t.Errorf("gRPC load after the HTTP append: %v", got)
	}

	// List: filters and pages.
	for i := range 3 {
		h.call(t, "POST", "/v1/namespaces/pages/sessions", fmt.Sprintf(`{"alias": "p%d", "labels": {"even": "%v"}}`, i, i%2 == 0), nil)
	}
	page1 := stream[sessiondv1.ListSessionsResponse](t, h, "/v1/sessions?namespace=pages&limit=2")
	if len(page1) != 2 || page1[1].GetNextPageToken() == "" {
		t.Fatalf("list limit=2: %v", page1)
	}
	page2 := stream[sessiondv1.ListSessionsResponse](t, h, "/v1/namespaces/pages/sessions?page_token="+page1[1].GetNextPageToken())
	if len(page2) != 1 || page2[0].GetSession().GetAlias() != "p0" {
		t.Errorf("list after the page token: %v, want only p0 (the oldest)", page2)
	}
	even := stream[sessiondv1.ListSessionsResponse](t, h, "/v1/sessions?namespace=pages&labels%5Beven%5D=true")
	if len(even) != 2 {
		t.Errorf("list labels[even]=true: %d sessions, want 2 (p0, p2)", len(even))
	}
	byPrefix := stream[sessiondv1.ListSessionsResponse](t, h, "/v1/sessions?namespace=pages&alias_prefix=p1")
	if len(byPrefix) != 1 || byPrefix[0].GetSession().GetAlias() != "p1" {
		t.Errorf("list alias_prefix=p1: %v", byPrefix)
	}

	// Update: the mask is the fields the body names; then a rename.
	var ur sessiondv1.UpdateSessionResponse
	h.call(t, "PATCH", "/v1/sessions/"+id, `{"title": "Weather, renamed"}`, &ur)
	if ur.GetSession().GetTitle() != "Weather, renamed" || ur.GetSession().GetAlias() != "weather" || ur.GetSession().GetLabels()["team"] != "a" {
		t.Errorf("PATCH title: %v; want the new title and alias and labels kept", ur.GetSession())
	}
	h.call(t, "PATCH", "/v1/aliases/weather", `{"alias": "paris"}`, &ur)
	if ur.GetSession().GetAlias() != "paris" {
		t.Errorf("PATCH alias: %v", ur.GetSession())
	}
	h.fail(t, "GET", "/v1/aliases/weather", "", http.StatusNotFound, codes.NotFound)

	// Fork and rewind.
	var fr sessiondv1.ForkSessionResponse
	h.call(t, "POST", "/v1/aliases/paris:fork", `{"messageCount": "2", "alias": "paris-fork"}`, &fr)
	if fr.GetSession().GetParent().GetSessionId() != id || fr.GetSession().GetMessageCount() != 2 {
		t.Errorf("fork: %v; want parent %s and 2 messages", fr.GetSession(), id)
	}
	h.fail(t, "POST", "/v1/sessions/"+id+":fork", `{"messageCount": "9"}`, http.StatusBadRequest, codes.InvalidArgument, "message_count")
	var rr sessiondv1.RewindSessionResponse
	h.call(t, "POST", "/v1/sessions/"+id+":rewind", `{"message_count": 1}`, &rr)
	if rr.GetSession().GetMessageCount() != 1 {
		t.Errorf("rewind to 1: %v", rr.GetSession())
	}

	// Search, with ?q= and ?query=.
	for _, q := range []string{"q=paris", "query=PARIS"} {
		hits := stream[sessiondv1.SearchSessionsResponse](t, h, "/v1/search?"+q)
		found := false
		for _, hit := range hits {
			found = found || hit.GetSession().GetId() == fr.GetSession().GetId()
		}
		if !found {
			t.Errorf("search ?%s: %v; want the fork (its message says Paris)", q, hits)
		}
	}

	// Delete with a stale revision, then for real.
	h.fail(t, "DELETE", "/v1/sessions/"+id+"?expected_revision=1", "", http.StatusConflict, codes.Aborted)
	h.call(t, "DELETE", "/v1/sessions/"+id, "", &sessiondv1.DeleteSessionResponse{})
	h.fail(t, "GET", "/v1/sessions/"+id, "", http.StatusNotFound, codes.NotFound)

	// Errors: validation with details, unknown fields, routes, methods.
	e := h.fail(t, "POST", "/v1/sessions", `{"alias": "bad/alias"}`, http.StatusBadRequest, codes.InvalidArgument, "alias")
	if len(e.Details) == 0 || len(e.Details[0].FieldViolations) == 0 || e.Details[0].FieldViolations[0].Field != "alias" {
		t.Errorf("bad alias: details %+v, want a google.rpc.BadRequest naming alias", e.Details)
	}
	h.fail(t, "POST", "/v1/sessions", `{"alias": "x", "titel": "typo"}`, http.StatusBadRequest, codes.InvalidArgument, "titel")
	h.fail(t, "POST", "/v1/sessions", `{not json`, http.StatusBadRequest, codes.InvalidArgument)
	h.fail(t, "GET", "/v1/sessions/not-a-uuid", "", http.StatusBadRequest, codes.InvalidArgument, "id")
	h.fail(t, "GET", "/v1/sessions/"+id+"/events?from_revision=-1", "", http.StatusBadRequest, codes.InvalidArgument, "from_revision")
	h.fail(t, "GET", "/v1/no/such/route", "", http.StatusNotFound, codes.NotFound)
	h.fail(t, "PUT", "/v1/sessions/"+id, "", http.StatusMethodNotAllowed, codes.Unimplemented, "PUT")

	// Server info and the OpenAPI document, as checked in.
	var info sessiondv1.GetServerInfoResponse
	h.call(t, "GET", "/v1/info", "", &info)
	if info.GetBackend() != "file" || info.GetLimits().GetMaxFrameBytes() == 0 {
		t.Errorf("info: %v", &info)
	}
	resp, doc := h.do(t, "GET", "/v1/openapi.json", "")
	want, err := os.ReadFile(filepath.Join(moduleRoot, "httpapi", "openapi", "sessiond.swagger.json"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(doc, want) {
		t.Errorf("GET /v1/openapi.json: status %d, %d bytes; want 200 and httpapi/openapi/sessiond.swagger.json (%d bytes)", resp.StatusCode, len(doc), len(want))
	}
	var spec struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(doc, &spec); err != nil || spec.Paths["/v1/sessions"]["post"] == nil || spec.Paths["/v1/sessions/{ref.id}"]["patch"] == nil {
		t.Errorf("the OpenAPI document lacks POST /v1/sessions or PATCH /v1/sessions/{ref.id} (%v)", err)
	}

	// Every call was logged by the gRPC service, naming the HTTP client.
	sawHTTPPeer := false
	for _, l := range d.logLines() {
		if l["msg"] == "finished call" && strings.HasSuffix(fmt.Sprint(l["peer.address"]), "(http)") {
			sawHTTPPeer = true
		}
	}
	if !sawHTTPPeer {
		t.Errorf("no call log line names an HTTP peer (\"... (http)\"); log:\n%s", d.Logs())
	}
}

// TestHTTPLimits: a body over the HTTP limit is 413, and a frame over the
// service's limit is RESOURCE_EXHAUSTED (429), as over gRPC.
func TestHTTPLimits(t *testing.T) {
	_, h := startHTTPDaemon(t, t.TempDir(), "--max-frame-bytes", "4096", "--max-message-bytes", "4096")
	h.call(t, "POST", "/v1/sessions", `{"alias": "small"}`, nil)
	big := strings.Repeat("x", 8000)
	h.fail(t, "POST", "/v1/aliases/small/messages", `{"messages": [{"id": "m1", "role": "ROLE_USER", "content": "`+big+`"}]}`,
		http.StatusTooManyRequests, codes.ResourceExhausted, "larger than max")
	huge := strings.Repeat("y", 2<<20) // over 2 x 4096 + 1 MiB
	h.fail(t, "POST", "/v1/aliases/small/messages", `{"messages": [{"id": "m1", "role": "ROLE_USER", "content": "`+huge+`"}]}`,
		http.StatusRequestEntityTooLarge, codes.ResourceExhausted, "limit")
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id, event, data string
}

// sseStream reads the events of an open event stream.
type sseStream struct {
	resp   *http.Response
	events chan sseEvent // closed at the end of the stream
	cancel context.CancelFunc
}

// openEvents opens an event stream, which must answer 200; close it with
// its cancel (also done when the test ends).
func (h *httpAPI) openEvents(t *testing.T, path string, header ...string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", h.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: status %d, Content-Type %q, want 200 text/event-stream; body %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	s := &sseStream{resp: resp, events: make(chan sseEvent, 64), cancel: cancel}
	go func() {
		defer close(s.events)
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.data != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[len("id: "):]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			}
		}
	}()
	return s
}

// next returns the next event, failing the test if none comes within 10 s
// or the stream ends.
func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatal("the event stream ended; want another event")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return sseEvent{}
}

// wantEnd fails unless the stream ends within 10 s without another event.
func (s *sseStream) wantEnd(t *testing.T) {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if ok {
			t.Fatalf("event %+v; want the stream to end", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the event stream did not end within 10s")
	}
}

// wantChange checks an event: its id, name and the revision and message
// ids of its data.
func wantChange(t *testing.T, ev sseEvent, revision uint64, name string, msgIDs ...string) {
	t.Helper()
	var w sessiondv1.WatchSessionResponse
	if err := protojson.Unmarshal([]byte(ev.data), &w); err != nil {
		t.Fatalf("event data is not a WatchSessionResponse: %v\n%s", err, ev.data)
	}
	var got []string
	for _, m := range w.GetMessages() {
		got = append(got, m.GetId())
	}
	if ev.id != fmt.Sprint(revision) || ev.event != name || w.GetRevision() != revision || strings.Join(got, ",") != strings.Join(msgIDs, ",") {
		t.Fatalf("event id %q %q revision %d messages %v; want id %d %q, messages %v", ev.id, ev.event, w.GetRevision(), got, revision, name, msgIDs)
	}
}

// TestHTTPEvents watches a session as Server-Sent Events: live changes,
// resumption with Last-Event-ID after a disconnect (nothing missed, nothing
// twice), refusals as HTTP statuses, the end after a delete, and the error
// event when the daemon shuts down.
func TestHTTPEvents(t *testing.T) {
	d, h := startHTTPDaemon(t, t.TempDir())
	ctx := testContext(t, 2*time.Minute)
	c := d.client(t)
	if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "live"}); err != nil {
		t.Fatal(err)
	}
	appendMsg := func(id string) {
		t.Helper()
		if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias("", "live"),
			Messages: []*sessiondv1.Message{textMsg(id, sessiondv1.Role_ROLE_USER, "hello "+id)}}); err != nil {
			t.Fatal(err)
		}
	}

	s := h.openEvents(t, "/v1/aliases/live/events")
	appendMsg("m1")
	wantChange(t, s.next(t), 2, "appended", "m1")
	s.cancel()

	// While no one watches: two appends and a title change.
	appendMsg("m2")
	appendMsg("m3")
	h.call(t, "PATCH", "/v1/aliases/live", `{"title": "Live"}`, nil)

	// Last-Event-ID wins over from_revision, as a reconnecting EventSource sends both.
	s = h.openEvents(t, "/v1/aliases/live/events?from_revision=4", "Last-Event-ID", "2")
	wantChange(t, s.next(t), 3, "appended", "m2")
	wantChange(t, s.next(t), 4, "appended", "m3")
	wantChange(t, s.next(t), 5, "updated")
	appendMsg("m4")
	wantChange(t, s.next(t), 6, "appended", "m4")
	s.cancel()
	s = h.openEvents(t, "/v1/aliases/live/events?from_revision=5")
	wantChange(t, s.next(t), 6, "appended", "m4")
	s.cancel()

	for _, tc := range []struct {
		path, lastID string
		status       int
		code         codes.Code
		mention      string
	}{
		{"/v1/aliases/live/events", "99", http.StatusBadRequest, codes.OutOfRange, "99"},
		{"/v1/aliases/live/events", "two", http.StatusBadRequest, codes.InvalidArgument, "Last-Event-ID"},
		{"/v1/aliases/dead/events", "", http.StatusNotFound, codes.NotFound, "dead"},
		{"/v1/namespaces/Bad!/aliases/live/events", "", http.StatusBadRequest, codes.InvalidArgument, "namespace"},
	} {
		var hdr []string
		if tc.lastID != "" {
			hdr = []string{"Last-Event-ID", tc.lastID}
		}
		resp, b := h.do(t, "GET", tc.path, "", hdr...)
		wantHTTPError(t, "GET "+tc.path+" Last-Event-ID "+tc.lastID, resp, b, tc.status, tc.code, tc.mention)
	}

	// A delete is the last event.
	s = h.openEvents(t, "/v1/aliases/live/events")
	h.call(t, "DELETE", "/v1/aliases/live", "", nil)
	ev := s.next(t)
	if ev.event != "deleted" {
		t.Fatalf("after DELETE: event %+v, want \"deleted\"", ev)
	}
	s.wantEnd(t)

	// Shutting down ends a stream with an error event (UNAVAILABLE), and
	// the daemon still exits cleanly.
	if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Alias: "last"}); err != nil {
		t.Fatal(err)
	}
	s = h.openEvents(t, "/v1/aliases/last/events")
	if err := d.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ev = s.next(t)
	var e httpError
	if err := json.Unmarshal([]byte(ev.data), &e); err != nil || ev.event != "error" || e.Code != codes.Unavailable {
		t.Fatalf("on shutdown: event %+v (%v); want an \"error\" event with code UNAVAILABLE", ev, err)
	}
	s.wantEnd(t)
	d.stop(t)
}

// TestHTTPAuth: with --auth-tokens, the HTTP side asks for the same bearer
// tokens as gRPC, checked by the same interceptors: none or an unknown one
// is 401 with a Bearer challenge, a role or namespace the token lacks is
// 403, and a session of another namespace is as absent as one that does
// not exist.
func TestHTTPAuth(t *testing.T) {
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	d, h := startHTTPDaemon(t, filepath.Join(dir, "data"), "--auth-tokens", toks.file)

	for _, secret := range []string{"", "not-a-token"} {
		resp, b := h.with(secret).do(t, "GET", "/v1/sessions?namespace="+nsA, "")
		wantHTTPError(t, "list with token "+secret, resp, b, http.StatusUnauthorized, codes.Unauthenticated)
		if ch := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(ch, "Bearer") {
			t.Errorf("401 WWW-Authenticate %q, want a Bearer challenge", ch)
		}
	}
	resp, b := h.do(t, "GET", "/v1/aliases/x/events?ref.namespace="+nsA, "")
	wantHTTPError(t, "events without a token", resp, b, http.StatusUnauthorized, codes.Unauthenticated)

	h.with(toks.readA).fail(t, "POST", "/v1/namespaces/"+nsA+"/sessions", `{"alias": "a1"}`, http.StatusForbidden, codes.PermissionDenied)
	var cr sessiondv1.CreateSessionResponse
	h.with(toks.writeA).call(t, "POST", "/v1/namespaces/"+nsA+"/sessions", `{"alias": "a1"}`, &cr)
	id := cr.GetSession().GetId()
	h.with(toks.writeA).fail(t, "POST", "/v1/namespaces/"+nsB+"/sessions", `{"alias": "b1"}`, http.StatusForbidden, codes.PermissionDenied)
	h.with(toks.writeA).fail(t, "GET", "/v1/namespaces/"+nsB+"/sessions/"+id, "", http.StatusForbidden, codes.PermissionDenied)
	h.with(toks.writeB).fail(t, "GET", "/v1/namespaces/"+nsB+"/sessions/"+id, "", http.StatusNotFound, codes.NotFound)
	h.with(toks.writeB).fail(t, "GET", "/v1/sessions/"+id+"?ref.namespace="+nsA, "", http.StatusForbidden, codes.PermissionDenied)
	h.with(toks.readA).call(t, "GET", "/v1/namespaces/"+nsA+"/sessions/"+id, "", nil)
	h.with(toks.readA).fail(t, "DELETE", "/v1/namespaces/"+nsA+"/sessions/"+id, "", http.StatusForbidden, codes.PermissionDenied)
	s := h.with(toks.readA).openEvents(t, "/v1/namespaces/"+nsA+"/aliases/a1/events")
	h.with(toks.writeA).call(t, "POST", "/v1/namespaces/"+nsA+"/aliases/a1/messages", `{"messages": [{"id": "m1", "role": "ROLE_USER", "content": "hi"}]}`, nil)
	wantChange(t, s.next(t), 2, "appended", "m1")

	if l := waitLog(t, d, "permission denied"); !strings.Contains(fmt.Sprint(l["peer"]), "(http)") {
		t.Errorf("the refusal's peer does not name the HTTP client: %v", l)
	}
}

// TestHTTPTLS: under --tls-cert and --tls-client-ca the HTTP listener
// serves the same certificate and asks for a client certificate of the
// same CA; HTTP/2 is offered.
func TestHTTPTLS(t *testing.T) {
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	serverCA, clientCA := testcerts.NewCA(t, dir, "server-ca"), testcerts.NewCA(t, dir, "client-ca")
	certFile, keyFile, serial := serverCA.Issue(t, dir, "server", false)
	clientCert, clientKey, _ := clientCA.Issue(t, dir, "agent-h", true)
	d := startDaemon(t, filepath.Join(dir, "data"), "--auth-tokens", toks.file, "--http-listen", "127.0.0.1:0",
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", clientCA.PEMFile)
	addr := httpAddr(t, d)

	pem, err := os.ReadFile(serverCA.PEMFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	mk := func(withCert bool) *httpAPI {
		cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if withCert {
			cert, err := tls.LoadX509KeyPair(clientCert, clientKey)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		return &httpAPI{base: "https://" + addr, token: toks.readA,
			client: &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}}
	}

	req, _ := http.NewRequestWithContext(t.Context(), "GET", "https://"+addr+"/v1/info", nil)
	if _, err := mk(false).client.Do(req); err == nil {
		t.Error("a client without a certificate got an answer; want the handshake refused")
	}
	if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addr + "/v1/info"); err == nil && resp.StatusCode == http.StatusOK {
		t.Error("plaintext HTTP to the TLS listener answered 200")
	}
	h := mk(true)
	resp, b := h.do(t, "GET", "/v1/info", "")
	if resp.StatusCode != http.StatusOK || resp.Proto != "HTTP/2.0" {
		t.Fatalf("HTTPS with a client certificate: %s %d %s", resp.Proto, resp.StatusCode, b)
	}
	if got := resp.TLS.PeerCertificates[0].SerialNumber; got.Cmp(serial) != 0 {
		t.Errorf("served certificate serial %v, want %v (--tls-cert's)", got, serial)
	}
	h.with("").fail(t, "GET", "/v1/info", "", http.StatusUnauthorized, codes.Unauthenticated)
	if l := waitLog(t, d, "unauthenticated call refused"); !strings.Contains(fmt.Sprint(l["peer"]), "CN=agent-h") {
		t.Errorf("the refusal's peer does not name the client certificate: %v", l)
	}
}

// TestHTTPListenRefusals: --http-listen follows --listen's rules, and its
// mistakes are usage errors (exit 2) that name it.
func TestHTTPListenRefusals(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		// --listen on a free port: the default, 7437, may be a running daemon's.
		{[]string{"--listen", "127.0.0.1:0", "--http-listen", "0.0.0.0:0"}, "refusing to serve"},
		{[]string{"--listen", "127.0.0.1:0", "--http-listen", "localhost"}, "--http-listen"},
		{[]string{"--http-listen", "127.0.0.1:7999", "--listen", "127.0.0.1:7999"}, "--http-listen"},
	} {
		cmd := exec.CommandContext(testContext(t, time.Minute), sessiondBin, append([]string{"--data-dir", t.TempDir()}, tc.args...)...)
		cmd.Env = cleanEnv()
		out, err := cmd.CombinedOutput()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), tc.mention) {
			t.Errorf("sessiond %v: %v, output %s; want exit status 2 naming %q", tc.args, err, out, tc.mention)
		}
	}
	// The environment variable turns it on as the flag does.
	d := startDaemonEnv(t, t.TempDir(), []string{"SESSIOND_HTTP_LISTEN=127.0.0.1:0"})
	h := &httpAPI{base: "http://" + httpAddr(t, d), client: &http.Client{Timeout: time.Minute}}
	h.call(t, "GET", "/v1/info", "", nil)
}

// readmeHTTPAddr is the address of the curl walkthrough in docs/http.md; the
// test runs its commands against its own daemon instead.
const readmeHTTPAddr = "127.0.0.1:7438"

// readmeCurlCommands returns the curl command lines of docs/http.md that call
// readmeHTTPAddr, in order.
func readmeCurlCommands(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(moduleRoot, "docs", "http.md"))
	if err != nil {
		t.Fatalf("read docs/http.md: %v", err)
	}
	var cmds []string
	for line := range strings.Lines(string(readme)) {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "curl ") && strings.Contains(line, readmeHTTPAddr) {
			cmds = append(cmds, line)
		}
	}
	return cmds
}

// TestReadmeHTTPWalkthrough runs docs/http.md's curl walkthrough as a reader
// would, in order, against a fresh daemon: a `curl -N` watch runs in the
// background, as in a second terminal, and must print the event of the
// append that follows it. Every answer is checked against what the commands
// before it wrote.
func TestReadmeHTTPWalkthrough(t *testing.T) {
	cmds := readmeCurlCommands(t)
	curl := lookTool(t, "curl")
	bash := lookTool(t, "bash")
	d, _ := startHTTPDaemon(t, t.TempDir())
	addr := httpAddr(t, d)
	ctx := testContext(t, scriptTimeout)
	env := []string{"PATH=" + filepath.Dir(curl) + string(os.PathListSeparator) + os.Getenv("PATH")}

	type watch struct {
		line string
		cmd  *exec.Cmd
		out  *syncbuf.Buffer
	}
	var watches []watch
	appended := map[string][]string{} // alias -> message ids appended so far
	seen := map[string]bool{}
	aliasIn := func(c string) string {
		if _, rest, ok := strings.Cut(c, "/v1/aliases/"); ok {
			return strings.FieldsFunc(rest, func(r rune) bool { return r == '/' || r == '?' || r == ' ' || r == '"' || r == '\'' })[0]
		}
		return ""
	}
	for _, c := range cmds {
		run := strings.ReplaceAll(c, readmeHTTPAddr, addr)
		if strings.Contains(c, " -N ") {
			w := watch{line: run, cmd: exec.CommandContext(ctx, bash, "-c", run), out: &syncbuf.Buffer{}}
			w.cmd.Env = append(os.Environ(), env...)
			w.cmd.Stdout = w.out
			if err := w.cmd.Start(); err != nil {
				t.Fatalf("%s: %v", c, err)
			}
			t.Cleanup(func() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() })
			// Like a reader, start the next command once the watch is on.
			waitFor(t, func() bool { return strings.Contains(w.out.String(), ": watching") }, c+" prints its opening comment")
			watches = append(watches, w)
			seen["watch"] = true
			continue
		}
		out := runScript(t, ctx, env, bash, "-c", run)
		alias := aliasIn(c)
		switch {
		case strings.Contains(c, "-X POST") && strings.Contains(c, "/v1/sessions "):
			var cr sessiondv1.CreateSessionResponse
			if err := protojson.Unmarshal([]byte(out), &cr); err != nil || cr.GetSession().GetId() == "" {
				t.Fatalf("%s answered %s (%v); want the new session", c, out, err)
			}
			seen["create"] = true
		case strings.Contains(c, "-X POST") && strings.Contains(c, "/messages"):
			var req struct {
				Messages []struct{ ID string } `json:"messages"`
			}
			if m := dataFlag.FindStringSubmatch(c); m == nil || json.Unmarshal([]byte(m[1]), &req) != nil {
				t.Fatalf("%s: no JSON -d body", c)
			}
			for _, m := range req.Messages {
				appended[alias] = append(appended[alias], m.ID)
			}
			var ar sessiondv1.AppendMessagesResponse
			if err := protojson.Unmarshal([]byte(out), &ar); err != nil || ar.GetMessageCount() != int64(len(appended[alias])) {
				t.Fatalf("%s answered %s (%v); want messageCount %d", c, out, err, len(appended[alias]))
			}
			for _, w := range watches {
				last := req.Messages[len(req.Messages)-1].ID
				waitFor(t, func() bool {
					s := w.out.String()
					return strings.Contains(s, fmt.Sprintf("id: %d\nevent: appended\n", ar.GetRevision())) && strings.Contains(s, `"id":"`+last+`"`)
				}, "the curl -N watch prints the event of "+c)
				seen["watched"] = true
			}
			seen["append"] = true
		case strings.HasSuffix(c, "/messages"):
			var got []string
			for line := range strings.Lines(out) {
				var f struct{ Result json.RawMessage }
				var lr sessiondv1.LoadSessionResponse
				if json.Unmarshal([]byte(line), &f) != nil || protojson.Unmarshal(f.Result, &lr) != nil {
					t.Fatalf("%s: line %q is not a {\"result\": LoadSessionResponse}", c, line)
				}
				for _, m := range lr.GetMessages() {
					got = append(got, m.GetId())
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(appended[alias]) {
				t.Errorf("%s printed messages %v, want %v (what the walkthrough appended)", c, got, appended[alias])
			}
			seen["load"] = true
		case strings.Contains(c, "/v1/sessions?"):
			for a := range appended {
				if !strings.Contains(out, `"alias":"`+a+`"`) {
					t.Errorf("%s does not list %s:\n%s", c, a, out)
				}
			}
			seen["list"] = true
		}
	}
	for _, w := range watches {
		t.Logf("bash -c %s (in the background) printed:\n%s", w.line, w.out.String())
	}
	for _, step := range []string{"create", "append", "load", "list", "watch", "watched"} {
		if !seen[step] {
			t.Errorf("docs/http.md's curl walkthrough (on %s) has no %s step", readmeHTTPAddr, step)
		}
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("within 10s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStopWithQuietConnections: connections to the HTTP and metrics
// listeners on which no request ever comes (a client pool's spare, a port
// check) do not hold the daemon's stop: it exits within 3 s of SIGTERM,
// where net/http's Shutdown alone waits until each is 5 s old.
func TestStopWithQuietConnections(t *testing.T) {
	d, _ := startHTTPDaemon(t, t.TempDir(), "--metrics-listen", "127.0.0.1:0")
	for _, addr := range []string{httpAddr(t, d), strings.TrimPrefix(metricsURL(t, d), "http://")} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	time.Sleep(200 * time.Millisecond) // accepted by the servers, not left in the listeners' backlogs
	start := time.Now()
	if err := d.SignalWait(syscall.SIGTERM, 3*time.Second); err != nil {
		t.Fatalf("sessiond did not stop within 3 s of SIGTERM with quiet connections open: %v; log:\n%s", err, d.Logs())
	}
	if err := d.Err(); err != nil {
		t.Fatalf("sessiond exited with %v after SIGTERM, want status 0; log:\n%s", err, d.Logs())
	}
	t.Logf("SIGTERM to exit: %v", time.Since(start).Round(time.Millisecond))
}
