package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/httpapi"
)

// These tests run the handler under the race detector against the real
// service in process (clienttest's server over a file store); the
// integration tests cover the daemon's HTTP listener end to end.

// newAPI serves the handler over a real service and returns its base URL.
func newAPI(t *testing.T, opts ...httpapi.Option) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := clienttest.NewServer(t, clienttest.WithListener(lis), clienttest.WithGRPCServerOptions(httpapi.PeerServerOptions()...))
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h, err := httpapi.New(t.Context(), conn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

func send(t *testing.T, method, url, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// mustSend sends a request that must answer want.
func mustSend(t *testing.T, want int, method, url, body string) []byte {
	t.Helper()
	code, _, b := send(t, method, url, body)
	if code != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, url, code, want, b)
	}
	return b
}

// events opens an event stream and returns its lines, one by one.
func events(t *testing.T, url string, header ...string) (<-chan string, func()) {
	t.Helper()
	ctx, cancel := contextWithCancel(t)
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: status %d: %s", url, resp.StatusCode, b)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return lines, cancel
}

// nextLine returns the next line that starts with prefix.
func nextLine(t *testing.T, lines <-chan string, prefix string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the stream ended before a line starting %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("no line starting %q within 10s", prefix)
		}
	}
}

func TestEventsResumeWithLastEventID(t *testing.T) {
	base := newAPI(t)
	mustSend(t, 200, "POST", base+"/v1/sessions", `{"alias": "w"}`)
	add := func(id string) {
		mustSend(t, 200, "POST", base+"/v1/aliases/w/messages", `{"messages": [{"id": "`+id+`", "role": "ROLE_USER", "content": "x"}]}`)
	}
	lines, stop := events(t, base+"/v1/aliases/w/events")
	nextLine(t, lines, ": watching from now")
	add("m1")
	if l := nextLine(t, lines, "id: "); l != "id: 2" {
		t.Fatalf("first event %q, want id: 2", l)
	}
	if l := nextLine(t, lines, "event: "); l != "event: appended" {
		t.Fatalf("event name %q", l)
	}
	stop()
	add("m2")
	add("m3")
	lines, stop = events(t, base+"/v1/aliases/w/events", "Last-Event-ID", "2")
	defer stop()
	for _, want := range []string{"3", "4"} {
		if l := nextLine(t, lines, "id: "); l != "id: "+want {
			t.Fatalf("resumed event %q, want id: %s", l, want)
		}
		data := nextLine(t, lines, "data: ")
		var ev struct {
			Revision string `json:"revision"`
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &ev); err != nil || ev.Revision != want {
			t.Fatalf("data %q: revision %q (%v), want %s", data, ev.Revision, err, want)
		}
	}
}

func TestEventsKeepAlive(t *testing.T) {
	old := httpapi.KeepAliveInterval
	httpapi.KeepAliveInterval = 20 * time.Millisecond
	t.Cleanup(func() { httpapi.KeepAliveInterval = old })
	base := newAPI(t)
	mustSend(t, 200, "POST", base+"/v1/sessions", `{"alias": "idle"}`)
	lines, stop := events(t, base+"/v1/aliases/idle/events")
	defer stop()
	nextLine(t, lines, ": keep-alive")
}

func TestErrorBodiesAndMounts(t *testing.T) {
	base := newAPI(t, httpapi.WithMaxBodyBytes(4096),
		httpapi.WithHandler("/extra/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "mounted") })))

	// A streaming route refused before its first frame answers the bare
	// status, as unary routes do.
	for _, path := range []string{"/v1/sessions?namespace=bad!", "/v1/aliases/bad!"} {
		code, _, b := send(t, "GET", base+path, "")
		var st map[string]any
		if err := json.Unmarshal(b, &st); err != nil || code != 400 || st["code"] != float64(3) || st["error"] != nil {
			t.Errorf("GET %s: %d %s (%v); want 400 and a bare status of code 3", path, code, b, err)
		}
	}
	code, _, b := send(t, "POST", base+"/v1/sessions", `{"alias": "`+strings.Repeat("x", 5000)+`"}`)
	if code != http.StatusRequestEntityTooLarge || !bytes.Contains(b, []byte(`"code":8`)) && !bytes.Contains(b, []byte(`"code": 8`)) {
		t.Errorf("a body over the limit: %d %s; want 413 with code 8", code, b)
	}
	mustSend(t, 200, "POST", base+"/v1/sessions", `{"alias": "found", "title": "needle"}`)
	if b := mustSend(t, 200, "GET", base+"/v1/search?q=needle", ""); !bytes.Contains(b, []byte(`"alias":"found"`)) {
		t.Errorf("search ?q=needle: %s", b)
	}
	if b := mustSend(t, 200, "GET", base+"/extra/x", ""); string(b) != "mounted" {
		t.Errorf("mounted handler answered %q", b)
	}
	if b := mustSend(t, 200, "GET", base+"/v1/openapi.json", ""); !bytes.Equal(b, httpapi.OpenAPI) {
		t.Error("/v1/openapi.json is not the embedded document")
	}
	if code, hdr, _ := send(t, "GET", base+"/v1/sessions", "", "Authorization", "Bearer x"); code != 200 || hdr.Get("WWW-Authenticate") != "" {
		t.Errorf("a server without tokens: %d, WWW-Authenticate %q", code, hdr.Get("WWW-Authenticate"))
	}
}

func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	return ctx, cancel
}

// TestBrowserProtections: a cross-origin browser request that could change
// data is refused (CSRF), and with WithLoopbackHostsOnly a Host that is not
// a loopback name is refused (DNS rebinding); curl-like requests pass.
func TestBrowserProtections(t *testing.T) {
	base := newAPI(t, httpapi.WithLoopbackHostsOnly())
	body := `{"alias": "csrf"}`
	for _, hdr := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Origin", "https://evil.example"},
	} {
		code, _, b := send(t, "POST", base+"/v1/sessions", body, hdr...)
		if code != http.StatusForbidden || !bytes.Contains(b, []byte("cross-origin")) {
			t.Errorf("POST with %v: %d %s; want 403 cross-origin", hdr, code, b)
		}
	}
	if code, _, b := send(t, "GET", base+"/v1/sessions", "", "Sec-Fetch-Site", "cross-site"); code != 200 {
		t.Errorf("a cross-site GET (cannot change data, cannot read the answer without CORS): %d %s", code, b)
	}
	if code, _, b := send(t, "GET", base+"/v1/sessions", "", "Host", "rebind.example:80"); code != http.StatusForbidden || !bytes.Contains(b, []byte("loopback")) {
		t.Errorf("Host rebind.example: %d %s; want 403 naming loopback", code, b)
	}
	for _, host := range []string{"localhost:1", "127.0.0.1", "[::1]:8", "app.localhost"} {
		if code, _, b := send(t, "GET", base+"/v1/info", "", "Host", host); code != 200 {
			t.Errorf("Host %s: %d %s; want 200", host, code, b)
		}
	}
	mustSend(t, 200, "POST", base+"/v1/sessions", body)
	if code, _, b := send(t, "POST", base+"/v1/sessions", `{"alias": "same"}`, "Sec-Fetch-Site", "same-origin"); code != 200 {
		t.Errorf("a same-origin POST (the viewer): %d %s", code, b)
	}
}

// BenchmarkAppend compares one durable append of a 1 KiB message over the
// JSON API with the same call over gRPC, both to the real service in
// process (file store, fsync'd): the difference is the HTTP side's cost.
//
//	go test ./httpapi -run '^$' -bench Append -benchtime 500x
func BenchmarkAppend(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := clienttest.NewServer(b, clienttest.WithListener(lis), clienttest.WithGRPCServerOptions(httpapi.PeerServerOptions()...))
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	h, err := httpapi.New(b.Context(), conn)
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(h)
	b.Cleanup(ts.Close)
	c := sessiondv1.NewSessionStoreServiceClient(conn)
	content := strings.Repeat("x", 1024)
	runs := 0 // each run of a sub-benchmark appends to a session of its own

	b.Run("grpc", func(b *testing.B) {
		runs++
		alias := fmt.Sprint("bench-grpc-", runs)
		if _, err := c.CreateSession(b.Context(), &sessiondv1.CreateSessionRequest{Alias: alias}); err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			_, err := c.AppendMessages(b.Context(), &sessiondv1.AppendMessagesRequest{
				Ref:      &sessiondv1.SessionRef{Key: &sessiondv1.SessionRef_Alias{Alias: alias}},
				Messages: []*sessiondv1.Message{{Id: fmt.Sprint("m", i), Role: sessiondv1.Role_ROLE_USER, Content: content}},
			})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("http", func(b *testing.B) {
		runs++
		alias := fmt.Sprint("bench-http-", runs)
		hc := &http.Client{}
		post := func(path, body string) {
			resp, err := hc.Post(ts.URL+path, "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("POST %s: %d", path, resp.StatusCode)
			}
		}
		post("/v1/sessions", `{"alias": "`+alias+`"}`)
		for i := 0; b.Loop(); i++ {
			post("/v1/aliases/"+alias+"/messages", fmt.Sprintf(`{"messages": [{"id": "m%d", "role": "ROLE_USER", "content": %q}]}`, i, content))
		}
	})
}

// TestEventsCutOffStalledClient: a client that stops reading its event
// stream is cut off once a write cannot finish within StalledWriteTimeout,
// instead of holding the watch forever.
func TestEventsCutOffStalledClient(t *testing.T) {
	old := httpapi.StalledWriteTimeout
	httpapi.StalledWriteTimeout = 200 * time.Millisecond
	t.Cleanup(func() { httpapi.StalledWriteTimeout = old })
	base := newAPI(t)
	mustSend(t, 200, "POST", base+"/v1/sessions", `{"alias": "stall"}`)

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	if _, err := io.WriteString(conn, "GET /v1/aliases/stall/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Read up to the opening comment: the watch is in place.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var head []byte
	for !bytes.Contains(head, []byte(": watching from now")) {
		b := make([]byte, 1)
		if _, err := conn.Read(b); err != nil {
			t.Fatalf("reading the stream's start %q: %v", head, err)
		}
		head = append(head, b[0])
	}
	// Events beyond what the sockets' buffers hold (on Linux about 4 MiB
	// of send buffer and, for a reader that reads nothing, little more),
	// while nobody reads.
	big := strings.Repeat("z", 256<<10)
	for i := range 32 {
		mustSend(t, 200, "POST", base+"/v1/aliases/stall/messages", fmt.Sprintf(`{"messages": [{"id": "m%d", "role": "ROLE_USER", "content": %q}]}`, i, big))
	}
	time.Sleep(time.Second)
	// Now read: the server must have ended the stream (EOF), not kept it.
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := io.Copy(io.Discard, conn)
	if err != nil {
		t.Fatalf("after %d bytes: %v; want the server to have closed the stalled stream", n, err)
	}
	if n >= 32*256<<10 {
		t.Errorf("read %d bytes: every event arrived, so the client was never cut off", n)
	}
}

// TestInvalidUTF8 sends strings that are not valid UTF-8 in a JSON body,
// as raw bytes and as a lone surrogate escape: each is 400
// INVALID_ARGUMENT naming the field, and nothing is stored.
func TestInvalidUTF8(t *testing.T) {
	base := newAPI(t)
	mustSend(t, http.StatusOK, "POST", base+"/v1/sessions", `{"alias": "u"}`)
	for _, c := range []struct {
		name, url, body, field string
	}{
		{"raw byte in a message", "/v1/aliases/u/messages", "{\"messages\": [{\"role\": \"ROLE_USER\", \"content\": \"a\xffb\"}]}", "messages[0].content"},
		{"raw byte in a title", "/v1/sessions", "{\"title\": \"\xc3\x28\"}", "title"},
		{"lone surrogate escape", "/v1/aliases/u/messages", `{"messages": [{"role": "ROLE_USER", "content": "ok"}, {"role": "ROLE_USER", "content": "a\ud800b"}]}`, "messages[1].content"},
		{"map value", "/v1/aliases/u/messages", "{\"messages\": [{\"role\": \"ROLE_USER\", \"metadata\": {\"k\": \"\xff\"}}]}", `messages[0].metadata["k"]`},
		{"camel-case name", "/v1/aliases/u/messages", "{\"messages\": [{\"role\": \"ROLE_TOOL\", \"toolCallId\": \"\xff\"}]}", "messages[0].tool_call_id"},
	} {
		code, _, b := send(t, "POST", base+c.url, c.body)
		var st struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			t.Fatalf("%s: body %q is not a status: %v", c.name, b, err)
		}
		if code != http.StatusBadRequest || st.Code != 3 || !strings.Contains(st.Message, c.field) {
			t.Errorf("%s: status %d, %s; want 400 INVALID_ARGUMENT naming %s", c.name, code, b, c.field)
		}
	}
	b := mustSend(t, http.StatusOK, "GET", base+"/v1/aliases/u", "")
	if !strings.Contains(string(b), `"revision":"1"`) {
		t.Errorf("session after refused appends: %s; want revision 1", b)
	}
	// A surrogate pair and an escaped backslash before a u are valid.
	mustSend(t, http.StatusOK, "POST", base+"/v1/aliases/u/messages", `{"messages": [{"role": "ROLE_USER", "content": "\ud83d\ude00 \\udc00"}]}`)
	b = mustSend(t, http.StatusOK, "GET", base+"/v1/aliases/u/messages", "")
	if !strings.Contains(string(b), `"content":"😀 \\udc00"`) {
		t.Errorf("stored message: %s; want the emoji and the escaped backslash", b)
	}
}
