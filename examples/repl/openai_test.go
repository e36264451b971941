package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"

	"github.com/sessiond/sessiond/client"
	"github.com/sessiond/sessiond/clienttest"
	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
)

// fakeModel is an OpenAI-compatible chat completions endpoint that streams
// its answers as server-sent events, one word a chunk, and records the
// requests it got.
type fakeModel struct {
	mu       sync.Mutex
	requests []chatRequest
	auth     []string
	answers  []string    // the answer to each request, in turn; "!401" answers 401
	midway   func(n int) // if set, called after the first word of answer n (0, 1...)
}

func (f *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, "no route "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	n := len(f.requests)
	f.requests = append(f.requests, req)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	answer := f.answers[n%len(f.answers)]
	f.mu.Unlock()
	if answer == "!401" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(v any) {
		b, _ := json.Marshal(v)
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	_, _ = io.WriteString(w, ": keep-alive comment\n\n")
	send(map[string]any{"model": "fake-model-0613", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}}}})
	send(map[string]any{"model": "fake-model-0613", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"reasoning_content": "thinking about " + req.Messages[len(req.Messages)-1].Content}}}})
	for i, word := range strings.SplitAfter(answer, " ") {
		send(map[string]any{"model": "fake-model-0613", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": word}}}, "usage": nil})
		if i == 0 {
			time.Sleep(20 * time.Millisecond) // a real stream: the answer arrives in pieces
			if f.midway != nil {
				f.midway(n)
			}
		}
	}
	send(map[string]any{"model": "fake-model-0613", "choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}})
	send(map[string]any{"model": "fake-model-0613", "choices": []any{}, "usage": map[string]any{
		"prompt_tokens": 10 * (n + 1), "completion_tokens": len(strings.Fields(answer)),
		"prompt_tokens_details":     map[string]any{"cached_tokens": 4},
		"completion_tokens_details": map[string]any{"reasoning_tokens": 2},
	}})
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// TestChatWithModel runs the REPL against a fake endpoint: each answer is
// streamed to the terminal and stored, as a finished live turn, with the
// model and usage the endpoint reported; each request carries the whole conversation, the API
// key and stream_options.include_usage; a refused request stores nothing
// and says why; the resume command keeps talking to the model.
func TestChatWithModel(t *testing.T) {
	srv := loopbackServer(t)
	fake := &fakeModel{answers: []string{"Hello there, human.", "!401", "Second answer."}}
	endpoint := httptest.NewServer(fake)
	t.Cleanup(endpoint.Close)
	t.Setenv("OPENAI_API_KEY", "sk-test-key")

	args := []string{"--addr", srv.Addr(), "--openai-base-url", endpoint.URL + "/v1/", "--model", "fake-model", "--autosave", "0"}
	out, errOut := runREPL(t, args, "hello\nrefused line\nagain\n/quit\n")
	t.Logf("transcript:\n$ OPENAI_API_KEY=sk-test-key repl %s\n%s%s", strings.Join(args, " "), out, errOut)

	for _, want := range []string{"assistant: Hello there, human.\n", "assistant: Second answer.\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "assistant: \n") {
		t.Errorf("the refused line left an empty answer:\n%s", out)
	}
	if want := "error: model at " + endpoint.URL + "/v1/chat/completions: 401 Unauthorized: Incorrect API key provided\n"; !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut)
	}
	ra := resumeArgs(t, out)
	if want := []string{"--openai-base-url", endpoint.URL + "/v1", "--model", "fake-model"}; !slices.Equal(ra[len(ra)-4:], want) {
		t.Errorf("resume args %q, want them to end with %q", ra, want)
	}

	// What the endpoint was asked: the conversation so far, the refused
	// line not in it, with the key and the usage option.
	fake.mu.Lock()
	reqs, auth := fake.requests, fake.auth
	fake.mu.Unlock()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	wantLast := []chatMessage{{"user", "hello"}, {"assistant", "Hello there, human."}, {"user", "again"}}
	if diff := cmp.Diff(wantLast, reqs[2].Messages); diff != "" {
		t.Errorf("third request's messages (-want +got):\n%s", diff)
	}
	for i, r := range reqs {
		if r.Model != "fake-model" || !r.Stream || !r.StreamOptions.IncludeUsage || auth[i] != "Bearer sk-test-key" {
			t.Errorf("request %d: model %q, stream %v, include_usage %v, Authorization %q", i, r.Model, r.Stream, r.StreamOptions.IncludeUsage, auth[i])
		}
	}

	// What sessiond holds.
	id := regexp.MustCompile(`new session (\S+);`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("no new session line:\n%s", out)
	}
	c, err := client.Dial(t.Context(), srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, msgs, err := c.Load(t.Context(), client.ID(id[1]), client.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	usage := func(in, out int64) *sessiondv1.Usage {
		return &sessiondv1.Usage{InputTokens: in, OutputTokens: out, CachedInputTokens: 4, ReasoningTokens: 2}
	}
	want := []*sessiondv1.Message{
		{Role: sessiondv1.Role_ROLE_USER, Content: "hello"},
		{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "Hello there, human.", Model: "fake-model-0613", Usage: usage(10, 3),
			Reasoning: &sessiondv1.Reasoning{Text: "thinking about hello"}, State: sessiondv1.MessageState_MESSAGE_STATE_COMPLETE},
		{Role: sessiondv1.Role_ROLE_USER, Content: "again"},
		{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "Second answer.", Model: "fake-model-0613", Usage: usage(30, 2),
			Reasoning: &sessiondv1.Reasoning{Text: "thinking about again"}, State: sessiondv1.MessageState_MESSAGE_STATE_COMPLETE},
	}
	got := make([]*sessiondv1.Message, len(msgs))
	for i, m := range msgs {
		got[i] = proto.CloneOf(m)
		got[i].Id, got[i].CreatedAt = "", nil
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("stored messages (-want +got):\n%s", diff)
	}
	if !slices.Equal(s.Models, []string{"fake-model-0613"}) {
		t.Errorf("session models %q, want the endpoint's model", s.Models)
	}
}

// TestStreamInterrupted: an answer cut short (Ctrl-C cancels the request)
// keeps what was shown, marked finish_reason "interrupted"; a stream that
// ends without finishing is an error.
func TestStreamInterrupted(t *testing.T) {
	release := make(chan struct{})
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"model":"m","choices":[{"delta":{"content":"partial "}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		if r.URL.Query().Has("hang") {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	t.Cleanup(endpoint.Close)
	defer close(release)

	m, err := newChatModel(endpoint.URL+"/v1", "", "m")
	if err != nil {
		t.Fatal(err)
	}
	m.endpoint = endpoint.URL + "/v1/chat/completions?hang"
	ctx, cancel := context.WithCancel(t.Context())
	var shown bytes.Buffer
	time.AfterFunc(200*time.Millisecond, cancel)
	rep, err := m.stream(ctx, []*sessiondv1.Message{{Role: sessiondv1.Role_ROLE_USER, Content: "hi"}}, &shown)
	if err == nil || rep == nil || rep.content != "partial " || shown.String() != "partial " {
		t.Fatalf("interrupted stream: %+v, %v, shown %q; want the partial answer and an error", rep, err, shown.String())
	}
	if got := rep.message().GetMetadata()["finish_reason"]; got != "interrupted" {
		t.Errorf("finish_reason %q, want interrupted", got)
	}

	m.endpoint = endpoint.URL + "/v1/chat/completions"
	if _, err := m.stream(t.Context(), nil, io.Discard); err == nil || !strings.Contains(err.Error(), "ended before its end") {
		t.Errorf("a stream that stops without finish_reason: %v, want an error", err)
	}
}

func TestModelFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", "gpt"}, "--model needs --openai-base-url"},
		{[]string{"--openai-base-url", "http://127.0.0.1:1/v1"}, "--model is required"},
		{[]string{"--openai-base-url", "ftp://x/v1", "--model", "m"}, "want an http or https URL"},
	} {
		var out, errOut bytes.Buffer
		err := run(t.Context(), tc.args, strings.NewReader(""), &out, &errOut, nil)
		if err == nil || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("run(%q): %v, stderr %q; want a usage error saying %q", tc.args, err, errOut.String(), tc.want)
		}
	}
}

// TestAnswerStreamedLive: the model's answer is in the session while it
// streams (an open message holding the pieces so far, which any watcher
// follows), and finished with the endpoint's model and usage at its end.
func TestAnswerStreamedLive(t *testing.T) {
	srv := loopbackServer(t)
	c, err := client.Dial(t.Context(), srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var during *sessiondv1.Message
	fake := &fakeModel{answers: []string{"Hello there, human."}, midway: func(int) {
		// The endpoint holds the rest of the answer until the session
		// has its first piece.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			_, msgs, err := c.Load(t.Context(), client.Alias("live"), client.LoadOptions{Tail: true, Limit: 1})
			if err == nil && len(msgs) == 1 && msgs[0].GetRole() == sessiondv1.Role_ROLE_ASSISTANT && msgs[0].GetContent() != "" {
				during = msgs[0]
				return
			}
		}
	}}
	endpoint := httptest.NewServer(fake)
	t.Cleanup(endpoint.Close)

	out, errOut := runREPL(t, []string{"--addr", srv.Addr(), "--session", "live", "--openai-base-url", endpoint.URL + "/v1",
		"--model", "fake-model", "--autosave", "0"}, "hello\n/quit\n")
	if !strings.Contains(out, "assistant: Hello there, human.\n") {
		t.Errorf("stdout lacks the answer:\n%s%s", out, errOut)
	}
	if during.GetContent() != "Hello " || during.GetReasoning().GetText() != "thinking about hello" ||
		during.GetState() != sessiondv1.MessageState_MESSAGE_STATE_STREAMING {
		t.Errorf("mid-answer the session's last message was %v, want the open answer so far", during)
	}
	_, msgs, err := c.Load(t.Context(), client.Alias("live"), client.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[1].GetId() != during.GetId() || msgs[1].GetContent() != "Hello there, human." ||
		msgs[1].GetModel() != "fake-model-0613" || msgs[1].GetUsage().GetOutputTokens() != 3 ||
		msgs[1].GetState() != sessiondv1.MessageState_MESSAGE_STATE_COMPLETE {
		t.Errorf("stored %v, want the question and the finished answer", msgs)
	}
}

// TestResumeInterruptedAnswer: resuming a session whose last answer's
// writer died mid-answer says that the answer was interrupted.
func TestResumeInterruptedAnswer(t *testing.T) {
	needBinaries(t)
	d := clienttest.StartDaemon(t, daemonBin, t.TempDir(), "127.0.0.1:0", clienttest.WithArgs("--stream-idle-timeout", "1s"))
	c, err := client.Dial(t.Context(), d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := c.New(t.Context(), client.WithAlias("cut"))
	if err != nil {
		t.Fatal(err)
	}
	_ = h.Append(&sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "tell me"})
	turn, err := h.StreamTurn(t.Context(), &sessiondv1.Message{})
	if err != nil {
		t.Fatal(err)
	}
	if err := turn.Write(t.Context(), "the first half"); err != nil {
		t.Fatal(err)
	}
	// The writer dies here; the daemon's sweep closes the answer.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, msgs, err := c.Load(t.Context(), client.Alias("cut"), client.LoadOptions{Tail: true, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if msgs[0].GetState() == sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not interrupt the answer: %v", msgs[0])
		}
	}
	out, errOut := runREPL(t, []string{"--addr", d.Addr, "--session", "cut"}, "/quit\n")
	for _, want := range []string{"assistant: the first half\n", "(the last answer was interrupted"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s%s", want, out, errOut)
		}
	}
}

// TestModelAnswerWhileDaemonDown: with the daemon down the answer cannot be
// a live turn; it is kept as a plain message in the spool, and the next run
// sends it once.
func TestModelAnswerWhileDaemonDown(t *testing.T) {
	needBinaries(t)
	d := clienttest.StartDaemon(t, daemonBin, t.TempDir(), "127.0.0.1:0")
	endpoint := httptest.NewServer(&fakeModel{answers: []string{"Hello there, human.", "Second answer."}})
	t.Cleanup(endpoint.Close)
	state := t.TempDir()
	args := []string{"--addr", d.Addr, "--session", "down", "--openai-base-url", endpoint.URL + "/v1", "--model", "fake-model"}
	p := startREPL(t, state, args...)
	p.waitFor("new session ")
	// Lines are handled in turn: once /help is answered, the answer before
	// it is finished (or, with the daemon down, in the spool).
	answer := func(line, want string) {
		p.send(line)
		p.waitFor(want)
		p.send("/help")
		p.waitFor("/quit              save and quit")
	}
	answer("first", "assistant: Hello there, human.")
	d.Kill(t)
	answer("second", "assistant: Second answer.")
	p.signal(syscall.SIGKILL)
	_ = p.wait()
	t.Logf("first run:\n%s", p.transcript())

	d = d.Restart(t)
	t.Setenv("XDG_STATE_HOME", state)
	runREPL(t, args, "/quit\n")
	c, err := client.Dial(t.Context(), d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, msgs, err := c.Load(t.Context(), client.Alias("down"), client.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, m.GetContent()+" "+m.GetState().String())
	}
	want := []string{"first MESSAGE_STATE_UNSPECIFIED", "Hello there, human. MESSAGE_STATE_COMPLETE",
		"second MESSAGE_STATE_UNSPECIFIED", "Second answer. MESSAGE_STATE_UNSPECIFIED"}
	if !slices.Equal(got, want) {
		t.Errorf("stored %q, want %q", got, want)
	}
}

// midAnswer starts the REPL on the session alias with a fake endpoint, sends
// "first", and returns once the session holds the first piece of the open
// answer ("Hello "): the endpoint holds the rest until release is called
// (the test's end calls it too). The second answer comes whole.
func midAnswer(t *testing.T, srv *clienttest.Server, alias string) (p *replProc, c *client.Client, release func()) {
	t.Helper()
	reached, held := make(chan struct{}), make(chan struct{})
	endpoint := httptest.NewServer(&fakeModel{answers: []string{"Hello there, human.", "Second answer."}, midway: func(n int) {
		if n == 0 {
			close(reached)
			<-held
		}
	}})
	t.Cleanup(endpoint.Close)
	release = sync.OnceFunc(func() { close(held) })
	t.Cleanup(release) // before endpoint.Close, which waits for the held answer
	c, err := client.Dial(t.Context(), srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	p = startREPL(t, t.TempDir(), "--addr", srv.Addr(), "--session", alias, "--openai-base-url", endpoint.URL+"/v1", "--model", "fake-model")
	p.waitFor("new session ")
	p.send("first")
	<-reached
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, msgs, err := c.Load(t.Context(), client.Alias(alias), client.LoadOptions{Tail: true, Limit: 1})
		if err == nil && len(msgs) == 1 && msgs[0].GetContent() == "Hello " {
			return p, c, release
		}
		if time.Now().After(deadline) {
			t.Fatalf("the answer's first piece never reached the session: %v %v", msgs, err)
		}
	}
}

// TestDaemonGoneMidAnswer: when the daemon goes away in the middle of an
// answer, the next line first finishes the open answer, whole, once the
// daemon is back.
func TestDaemonGoneMidAnswer(t *testing.T) {
	needBinaries(t)
	srv := loopbackServer(t)
	p, _, release := midAnswer(t, srv, "gone")
	srv.Stop()
	release()
	p.waitFor("is not answering")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// Until the REPL has reconnected, the line is refused and can be sent
	// again.
	for i := 0; ; i++ {
		p.send("second")
		if strings.Contains(p.waitFor("Second answer.", "still open"), "Second answer.") {
			break
		}
		if i == 50 {
			t.Fatalf("the open answer was never finished:\n%s", p.transcript())
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.send("/quit")
	p.waitFor("resume with: ")
	_, got := stored(t, srv.Addr(), client.Alias("gone"))
	if want := []string{"first", "Hello there, human.", "second", "Second answer."}; !slices.Equal(got, want) {
		t.Errorf("stored %q, want %q", got, want)
	}
}

// TestCtrlCMidAnswer: Ctrl-C in the middle of an answer stops the model and
// closes the live turn as interrupted with what came, so the session goes
// on.
func TestCtrlCMidAnswer(t *testing.T) {
	needBinaries(t)
	srv := loopbackServer(t)
	p, c, _ := midAnswer(t, srv, "cut")
	p.signal(syscall.SIGINT)
	p.waitFor("error: interrupted")
	_, msgs, err := c.Load(t.Context(), client.Alias("cut"), client.LoadOptions{Tail: true, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if m := msgs[0]; m.GetContent() != "Hello " || m.GetState() != sessiondv1.MessageState_MESSAGE_STATE_INTERRUPTED {
		t.Errorf("after Ctrl-C the answer is %v, want it closed as interrupted as far as it came", m)
	}
	p.send("second")
	p.waitFor("assistant: Second answer.")
	p.send("/quit")
	p.waitFor("resume with: ")
	_, got := stored(t, srv.Addr(), client.Alias("cut"))
	if want := []string{"first", "Hello ", "second", "Second answer."}; !slices.Equal(got, want) {
		t.Errorf("stored %q, want %q", got, want)
	}
}
