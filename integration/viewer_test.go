package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	sessiondv1 "github.com/sessiond/sessiond/gen/sessiond/v1"
	"github.com/sessiond/sessiond/internal/auth"
	"github.com/sessiond/sessiond/ui"
)

// The viewer's browser tests drive Debian's headless Chromium through the
// DevTools protocol (chromedp) against the real daemon's HTTP listener:
// they load pages, wait for what the scripts render, read the DOM, append
// through gRPC to see live updates arrive over the SSE watch, and keep
// screenshots in artifactsDir.

// Payloads stored in titles, content and tool arguments: each would change
// document.title or mark the body if it ever ran.
const (
	titlePayload   = `Payload <script>document.title='pwned-title'</script><img src=x onerror="document.body.dataset.pwned='title'">`
	contentScript  = `<script>document.title='pwned-content'</script>`
	contentImg     = `<img src=x onerror="document.body.dataset.pwned='content'">`
	argsScript     = `<script>document.title='pwned-args'</script>`
	argsImg        = `<img src=x onerror=\"document.body.dataset.pwned='args'\">` // inside a JSON string
	resultScript   = `<script>document.title='pwned-result'</script>`
	metadataImg    = `<img src=x onerror="document.body.dataset.pwned='metadata'">`
	blobScript     = `<script>document.title='pwned-blob'</script>`
	viewerNS       = "viewer"
	browserTimeout = 30 * time.Second
)

// onePixelPNG is a 1x1 PNG, attached to a message as an image.
var onePixelPNG, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")

// artifactsDir is where the browser tests leave their screenshots:
// $SESSIOND_TEST_ARTIFACTS, else integration/testdata/artifacts.
func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SESSIOND_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(moduleRoot, "integration", "testdata", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("artifacts dir: %v", err)
	}
	return dir
}

// startViewerDaemon starts a daemon with --http-listen and the extra
// arguments, and returns it with the HTTP base URL (http://127.0.0.1:PORT).
func startViewerDaemon(t *testing.T, extraArgs ...string) (*daemon, string) {
	t.Helper()
	d, api := startHTTPDaemon(t, filepath.Join(t.TempDir(), "data"), extraArgs...)
	return d, api.base
}

// browser is one headless Chromium with one tab. problems collects what
// the page must never report: uncaught exceptions, and messages about the
// Content-Security-Policy or Trusted Types (the browser refusing something
// the page tried).
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := lookTool(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests run as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(testContext(t, 3*time.Minute), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	// The first run starts the browser, which lives as long as ctx.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (%s): %v", path, err)
	}
	b := &browser{ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Source == "security" || strings.Contains(m.Text, "Content Security Policy") || strings.Contains(m.Text, "Trusted Type") {
				b.mu.Lock()
				b.problems = append(b.problems, m.String())
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// run runs actions with a time limit.
func (b *browser) run(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitFor polls the JavaScript expression until it is true. A poll that
// a navigation cuts short (the page it ran in is gone) starts again in the
// new page.
func (b *browser) waitFor(t *testing.T, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	for {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(50*time.Millisecond)))
		if err == nil {
			return
		}
		// -32000: the protocol's "the page or its context went away".
		if ctx.Err() == nil && strings.Contains(err.Error(), "(-32000)") {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		status, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById('status')?.textContent || ''`))
		t.Fatalf("waiting for %s (%s): %v; page status %q", what, expr, err, status)
	}
}

// eval evaluates expr, a JavaScript expression whose value (or the value
// its promise resolves to) is JSON, into out.
func (b *browser) eval(t *testing.T, expr string, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(async () => JSON.stringify(await (`+expr+`)))()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate: %v", err)
	}
	if err := json.Unmarshal([]byte(s), out); err != nil {
		t.Fatalf("evaluate: %v in %s", err, s)
	}
}

// screenshot saves a PNG of the whole page in the artifacts dir.
func (b *browser) screenshot(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, browserTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	p := filepath.Join(artifactsDir(t), name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
	return p
}

func (b *browser) checkNoProblems(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		t.Errorf("the page reported: %s", p)
	}
}

// pageSafety is what the viewer's DOM must never hold, read by safetyJS.
type pageSafety struct {
	Title    string   `json:"title"`
	Pwned    string   `json:"pwned"`
	Scripts  []string `json:"scripts"`
	Images   []string `json:"images"`
	Frames   int      `json:"frames"`
	Handlers []string `json:"handlers"`
	BadLinks []string `json:"badLinks"`
	Text     string   `json:"text"`
}

const safetyJS = `(() => {
  const q = (s) => [...document.querySelectorAll(s)];
  return {
    title: document.title,
    pwned: document.body.dataset.pwned || '',
    scripts: q('script').map((s) => s.getAttribute('src') || '(inline) ' + s.textContent),
    images: q('img').map((i) => i.getAttribute('src')),
    frames: q('iframe, object, embed, frame').length,
    handlers: q('*').flatMap((e) => [...e.attributes].filter((a) => a.name.startsWith('on')).map((a) => e.tagName + ' ' + a.name)),
    badLinks: q('a[href]').map((a) => a.getAttribute('href')).filter((h) => !/^(https?:|mailto:|\/|#)/.test(h)),
    text: document.body.textContent,
  };
})()`

// checkInert fails the test if anything stored became markup or ran.
func checkInert(t *testing.T, b *browser, wantTitle string, wantText ...string) {
	t.Helper()
	var s pageSafety
	b.eval(t, safetyJS, &s)
	if s.Title != wantTitle {
		t.Errorf("document.title = %q, want %q (a stored script ran?)", s.Title, wantTitle)
	}
	if s.Pwned != "" {
		t.Errorf("a stored event handler ran: body data-pwned=%q", s.Pwned)
	}
	if len(s.Scripts) != 1 || s.Scripts[0] != "/ui/static/app.js" {
		t.Errorf("script elements %q, want only /ui/static/app.js", s.Scripts)
	}
	for _, src := range s.Images {
		if !strings.HasPrefix(src, "data:image/png;base64,") {
			t.Errorf("an image from %q; only attached PNGs (data: URLs) may show", src)
		}
	}
	if s.Frames != 0 || len(s.Handlers) != 0 || len(s.BadLinks) != 0 {
		t.Errorf("stored data became elements: %d frames, handlers %q, links %q", s.Frames, s.Handlers, s.BadLinks)
	}
	for _, w := range wantText {
		if !strings.Contains(s.Text, w) {
			t.Errorf("page text lacks %q", w)
		}
	}
	b.checkNoProblems(t)
}

// seedViewerSession stores the session the browser tests look at: a
// system prompt, a user message in Markdown carrying payloads, an
// assistant message with two tool calls (read_file answered by the next
// ROLE_TOOL message, run_shell left open), and a last assistant message.
func seedViewerSession(t *testing.T, ctx context.Context, c sessiondv1.SessionStoreServiceClient, ns string) string {
	t.Helper()
	asst := textMsg("a1", sessiondv1.Role_ROLE_ASSISTANT, "I will read the file and list the directory.")
	asst.ToolCalls = []*sessiondv1.ToolCall{
		{Id: "call_read", Name: "read_file", Arguments: `{"path":"` + argsImg + `"}`},
		{Id: "call_ls", Name: "run_shell", Arguments: `{"cmd":"` + argsScript + `"}`},
	}
	tool := textMsg("t1", sessiondv1.Role_ROLE_TOOL, `{"text":"hello `+resultScript+`"}`)
	tool.ToolCallId, tool.Name = "call_read", "read_file"
	user := textMsg("u1", sessiondv1.Role_ROLE_USER, "# Question\nPlease **read** `notes.txt` and run `ls`.\n\n"+contentScript+"\n"+contentImg+
		"\n\n- one\n- two\n\n> quoted *text*\n\n```sh\nls -l "+contentScript+"\n```\n\n| file | size |\n|---|--:|\n| notes.txt | 12 |")
	user.Parts = []*sessiondv1.ContentPart{
		{Kind: &sessiondv1.ContentPart_Blob{Blob: &sessiondv1.Blob{MimeType: "image/png", Data: onePixelPNG}}},
		{Kind: &sessiondv1.ContentPart_Blob{Blob: &sessiondv1.Blob{MimeType: "text/html", Data: []byte(blobScript)}}},
	}
	last := textMsg("a2", sessiondv1.Role_ROLE_ASSISTANT, "Still waiting for `ls`; see [the docs](https://example.com/docs) or [this](javascript:document.title='pwned-link').")
	last.Metadata = map[string]string{"note": metadataImg}
	last.Model = "test-model-1"
	last.Usage = &sessiondv1.Usage{InputTokens: 120, OutputTokens: 30}
	resp, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{
		Namespace: ns,
		Title:     titlePayload,
		Summary:   "A **test** session.",
		Metadata:  map[string]string{"repl": "viewer-test", "note": metadataImg},
		Labels:    map[string]string{"team": "a"},
		Messages: []*sessiondv1.Message{
			textMsg("s1", sessiondv1.Role_ROLE_SYSTEM, "You are a helpful agent."),
			user, asst, tool, last,
		},
	})
	if err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return resp.GetSession().GetId()
}

// conversation is what the session page shows, read by conversationJS.
type conversation struct {
	Roles     []string `json:"roles"`
	Heading   string   `json:"heading"`
	Strong    []string `json:"strong"`
	ListItems []string `json:"listItems"`
	Links     []string `json:"links"`
	OpenCalls string   `json:"openCalls"`
	Revision  string   `json:"revision"`
	Calls     map[string]struct {
		Open      bool   `json:"open"`
		Message   string `json:"message"`
		Arguments string `json:"arguments"`
		Result    string `json:"result"`
		Collapsed bool   `json:"collapsed"`
	} `json:"calls"`
	PairedNote string   `json:"pairedNote"`
	Quote      string   `json:"quote"`
	Code       string   `json:"code"`
	CodeLang   string   `json:"codeLang"`
	Cells      []string `json:"cells"`
	Attachment string   `json:"attachment"`
	Images     int      `json:"images"`
	Model      string   `json:"model"`
	Usage      string   `json:"usage"`
}

const conversationJS = `(() => {
  const q = (s) => [...document.querySelectorAll(s)];
  const calls = {};
  for (const p of q('.tool-pair')) {
    calls[p.dataset.callId] = {
      open: p.classList.contains('open') && p.dataset.open === 'true' && !!p.querySelector('.open-badge'),
      message: p.closest('li').id,
      arguments: p.querySelector('.arguments').textContent,
      result: p.querySelector('.tool-result').textContent,
      collapsed: !p.querySelector('details.tool-call').open,
    };
  }
  return {
    roles: q('#messages > li').map((li) => li.dataset.role),
    heading: document.querySelector('#m-1 .md h1')?.textContent || '',
    strong: q('#m-1 .md strong').map((e) => e.textContent),
    listItems: q('#m-1 .md ul > li').map((e) => e.textContent),
    links: q('#messages a[target=_blank]').map((a) => a.href),
    openCalls: document.getElementById('open-calls')?.textContent || '',
    revision: document.querySelector('[data-fact=revision]')?.textContent || '',
    calls,
    pairedNote: document.querySelector('#m-3.paired')?.textContent || '',
    quote: document.querySelector('#m-1 .md blockquote em')?.textContent || '',
    code: document.querySelector('#m-1 .md pre code')?.textContent || '',
    codeLang: document.querySelector('#m-1 .md pre code')?.dataset.lang || '',
    cells: q('#m-1 .md table td').map((e) => e.textContent),
    attachment: document.querySelector('#m-1 p.blob')?.textContent || '',
    images: q('#m-1 img.blob').length,
    model: document.querySelector('#m-4 .model')?.textContent || '',
    usage: document.querySelector('#m-4 .usage')?.textContent || '',
  };
})()`

// TestViewerInBrowser loads a stored session with tool calls and payloads
// in headless Chromium: the conversation renders with roles, Markdown, each
// tool call beside its result, the open call marked, every payload as
// text, nothing run; an append shows up live through the SSE watch; the
// session list and search find it; the pages carry the strict CSP.
func TestViewerInBrowser(t *testing.T) {
	d, base := startViewerDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	c := d.client(t)
	id := seedViewerSession(t, ctx, c, viewerNS)
	pageURL := base + "/ui/sessions/" + id + "?namespace=" + viewerNS

	// The headers, as a plain HTTP client sees them.
	resp, err := http.Get(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") != ui.ContentSecurityPolicy ||
		resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET %s: %d, headers %v; want 200, the viewer's CSP, nosniff, text/html", pageURL, resp.StatusCode, resp.Header)
	}

	b := newBrowser(t)
	b.run(t, "open the session", chromedp.Navigate(pageURL))
	b.waitFor(t, "five messages", `document.querySelectorAll('#messages > li').length === 5 && document.getElementById('live')?.textContent.includes('live')`)
	wantTitle := titlePayload + " · sessiond"
	checkInert(t, b, wantTitle, titlePayload, contentScript, contentImg, argsScript, resultScript, metadataImg, "onerror=")

	var conv conversation
	b.eval(t, conversationJS, &conv)
	if want := []string{"system", "user", "assistant", "tool", "assistant"}; strings.Join(conv.Roles, ",") != strings.Join(want, ",") {
		t.Errorf("roles %q, want %q", conv.Roles, want)
	}
	if conv.Heading != "Question" || strings.Join(conv.Strong, ",") != "read" || strings.Join(conv.ListItems, ",") != "one,two" {
		t.Errorf("Markdown not rendered: heading %q, strong %q, list items %q", conv.Heading, conv.Strong, conv.ListItems)
	}
	if conv.Quote != "text" || conv.Code != "ls -l "+contentScript || conv.CodeLang != "sh" || strings.Join(conv.Cells, ",") != "notes.txt,12" {
		t.Errorf("Markdown blocks: quote %q, code %q (%q), table cells %q", conv.Quote, conv.Code, conv.CodeLang, conv.Cells)
	}
	if conv.Images != 1 || !strings.Contains(conv.Attachment, "attachment: text/html") {
		t.Errorf("attachments: %d images, note %q; want the PNG shown and the HTML named", conv.Images, conv.Attachment)
	}
	if conv.Model != "test-model-1" || conv.Usage != "input_tokens 120, output_tokens 30" {
		t.Errorf("message 5: model %q, usage %q", conv.Model, conv.Usage)
	}
	if strings.Join(conv.Links, ",") != "https://example.com/docs" {
		t.Errorf("links %q, want only https://example.com/docs (javascript: must stay text)", conv.Links)
	}
	read, ls := conv.Calls["call_read"], conv.Calls["call_ls"]
	if len(conv.Calls) != 2 || read.Message != "m-2" || ls.Message != "m-2" {
		t.Fatalf("tool calls %+v, want call_read and call_ls in message m-2", conv.Calls)
	}
	if read.Open || !strings.Contains(read.Result, "hello "+resultScript) || !strings.Contains(read.Arguments, `"path": "<img src=x onerror=`) {
		t.Errorf("call_read: %+v; want closed, its result beside it, its arguments as text", read)
	}
	if !ls.Open || !strings.Contains(ls.Result, "No result yet") || !strings.Contains(ls.Arguments, argsScript) {
		t.Errorf("call_ls: %+v; want marked open, with no result", ls)
	}
	if !strings.Contains(conv.OpenCalls, "1 open tool call") || !strings.Contains(conv.OpenCalls, "run_shell (call_ls)") {
		t.Errorf("open calls summary %q, want run_shell (call_ls)", conv.OpenCalls)
	}
	if !strings.Contains(conv.PairedNote, "shown beside its call") {
		t.Errorf("the tool message's own place says %q, want a pointer to its call", conv.PairedNote)
	}
	if conv.Revision != "1" {
		t.Errorf("revision fact %q, want 1", conv.Revision)
	}
	b.screenshot(t, "viewer-session.png")

	// Collapsing hides every tool call's body.
	b.run(t, "collapse", chromedp.Click(chromedp.CSS("#collapse-calls")))
	b.eval(t, conversationJS, &conv)
	if !conv.Calls["call_read"].Collapsed || !conv.Calls["call_ls"].Collapsed {
		t.Errorf("after Collapse tool calls: %+v", conv.Calls)
	}
	b.run(t, "expand", chromedp.Click(chromedp.CSS("#expand-calls")))

	// Live: the open call's result and an answer arrive through the watch.
	result := textMsg("t2", sessiondv1.Role_ROLE_TOOL, "README.md\nnotes.txt "+contentImg)
	result.ToolCallId, result.Name = "call_ls", "run_shell"
	if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byID(viewerNS, id), Messages: []*sessiondv1.Message{
		result, textMsg("a3", sessiondv1.Role_ROLE_ASSISTANT, "Done: **two** files."),
	}}); err != nil {
		t.Fatalf("AppendMessages: %v", err)
	}
	b.waitFor(t, "the appended messages", `document.querySelectorAll('#messages > li').length === 7`)
	b.eval(t, conversationJS, &conv)
	if ls := conv.Calls["call_ls"]; ls.Open || !strings.Contains(ls.Result, "notes.txt "+contentImg) {
		t.Errorf("after the live append, call_ls: %+v; want answered, its result beside it", ls)
	}
	if conv.OpenCalls != "" || conv.Revision != "2" || conv.Roles[6] != "assistant" {
		t.Errorf("after the live append: open calls %q, revision %q, roles %q", conv.OpenCalls, conv.Revision, conv.Roles)
	}
	checkInert(t, b, wantTitle, "Done: two files.")
	b.screenshot(t, "viewer-session-live.png")

	// A rewind replaces the messages: the page reloads them, and the
	// call is open again.
	if _, err := c.RewindSession(ctx, &sessiondv1.RewindSessionRequest{Ref: byID(viewerNS, id), MessageCount: 5}); err != nil {
		t.Fatalf("RewindSession: %v", err)
	}
	b.waitFor(t, "the rewound conversation", `document.querySelectorAll('#messages > li').length === 5 && document.querySelector('[data-fact=revision]')?.textContent === '3'`)
	b.eval(t, conversationJS, &conv)
	if !conv.Calls["call_ls"].Open || !strings.Contains(conv.OpenCalls, "run_shell (call_ls)") {
		t.Errorf("after the rewind, call_ls: %+v, open calls %q; want open again", conv.Calls["call_ls"], conv.OpenCalls)
	}

	// The list of the namespace, and a search that lands on the message.
	b.run(t, "open the list", chromedp.Navigate(base+"/ui/?namespace="+viewerNS))
	b.waitFor(t, "the session list", `document.querySelectorAll('table.sessions tbody tr').length === 1`)
	var row struct{ Title, Href, Count string }
	b.eval(t, `(() => { const r = document.querySelector('table.sessions tbody tr'); return {title: r.cells[0].textContent, href: r.querySelector('a').getAttribute('href'), count: r.cells[2].textContent}; })()`, &row)
	if row.Title != titlePayload || row.Href != "/ui/sessions/"+id+"?namespace="+viewerNS || row.Count != "5" {
		t.Errorf("list row %+v; want the payload title as text, a link to the session, 5 messages", row)
	}
	var facts struct{ Models, Tokens, TokensTitle, Updated, UpdatedTitle, Datetime, Labels string }
	b.eval(t, `(() => { const r = document.querySelector('table.sessions tbody tr'); const tm = r.querySelector('time'); return {
	  models: r.querySelector('td.models').textContent, tokens: r.querySelector('td.tokens').textContent,
	  tokensTitle: r.querySelector('td.tokens').title, updated: tm.textContent, updatedTitle: tm.title,
	  datetime: tm.getAttribute('datetime'), labels: r.cells[6].textContent}; })()`, &facts)
	if facts.Models != "test-model-1" || facts.Tokens != "120 / 30" || facts.TokensTitle != "input_tokens 120, output_tokens 30" || facts.Labels != "team=a" {
		t.Errorf("list row facts %+v; want the model, tokens in / out, the labels", facts)
	}
	// Updated a moment ago: said relatively, the exact time on hover.
	if updated, err := time.Parse(time.RFC3339Nano, facts.Datetime); err != nil || time.Since(updated) > time.Minute ||
		(facts.Updated != "just now" && !strings.HasSuffix(facts.Updated, "minute ago")) ||
		facts.UpdatedTitle != updated.UTC().Format("2006-01-02 15:04:05")+" UTC" {
		t.Errorf("updated %q (title %q, datetime %q); want a relative time with the exact one on hover", facts.Updated, facts.UpdatedTitle, facts.Datetime)
	}
	checkInert(t, b, "sessions · sessiond", titlePayload)
	b.screenshot(t, "viewer-list.png")

	b.run(t, "search", chromedp.Navigate(base+"/ui/?namespace="+viewerNS+"&q=notes.txt"))
	b.waitFor(t, "search hits", `document.querySelectorAll('table.sessions tbody tr').length > 0`)
	var hits []struct{ Href, Snippet string }
	b.eval(t, `[...document.querySelectorAll('table.sessions tbody tr')].map((r) => ({href: r.querySelector('a').getAttribute('href'), snippet: r.cells[2].textContent}))`, &hits)
	found := false
	for _, h := range hits {
		found = found || (h.Href == "/ui/sessions/"+id+"?namespace="+viewerNS+"#m-1" && strings.Contains(h.Snippet, "notes.txt"))
	}
	if !found {
		t.Errorf("search hits %+v; want the user message, #m-1, with notes.txt in its snippet", hits)
	}
	checkInert(t, b, "search: notes.txt · sessiond")
}

// TestViewerPaging lists a namespace of more sessions than a page holds:
// the first page has a link to the next, which holds the rest.
func TestViewerPaging(t *testing.T) {
	d, base := startViewerDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	c := d.client(t)
	const total = 53 // the viewer's page is 50 sessions
	for i := range total {
		if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: "paging", Title: fmt.Sprintf("session %02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	b := newBrowser(t)
	b.run(t, "open the list", chromedp.Navigate(base+"/ui/?namespace=paging"))
	b.waitFor(t, "a full first page", `document.querySelectorAll('table.sessions tbody tr').length === 50 && !!document.querySelector('a[rel=next]')`)
	var first string
	b.eval(t, `document.querySelector('table.sessions tbody tr').cells[0].textContent`, &first)
	if first != fmt.Sprintf("session %02d", total-1) {
		t.Errorf("first row %q, want the newest session", first)
	}
	b.run(t, "next page", chromedp.Click(chromedp.CSS("a[rel=next]")))
	b.waitFor(t, "the second page", `location.search.includes('page_token') && document.querySelectorAll('table.sessions tbody tr').length === 3 && !document.querySelector('a[rel=next]')`)
	var rows []string
	b.eval(t, `[...document.querySelectorAll('table.sessions tbody tr')].map((r) => r.cells[0].textContent)`, &rows)
	if strings.Join(rows, ",") != "session 02,session 01,session 00" {
		t.Errorf("second page %q, want the three oldest", rows)
	}
	b.checkNoProblems(t)
}

// TestViewerWithToken: with tokens on, the page says it needs one; a token
// typed into its field is kept for the tab and sent with every request,
// the watch's included.
func TestViewerWithToken(t *testing.T) {
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	d, base := startViewerDaemon(t, "--auth-tokens", toks.file)
	ctx := testContext(t, 3*time.Minute)
	c := d.client(t)
	id := seedViewerSession(t, withToken(ctx, toks.admin), c, nsA)

	b := newBrowser(t)
	b.run(t, "open the session", chromedp.Navigate(base+"/ui/sessions/"+id+"?namespace="+nsA))
	b.waitFor(t, "the token prompt", `document.getElementById('status').textContent.includes('needs a token')`)

	b.run(t, "enter a token of another namespace",
		chromedp.SendKeys(chromedp.CSS("#token"), toks.writeB),
		chromedp.Click(chromedp.CSS("#token-use")))
	b.waitFor(t, "the refusal", `document.getElementById('status').textContent.includes('may not read')`)

	b.run(t, "enter the reader's token",
		chromedp.SendKeys(chromedp.CSS("#token"), toks.readA),
		chromedp.Click(chromedp.CSS("#token-use")))
	b.waitFor(t, "five messages", `document.querySelectorAll('#messages > li').length === 5 && document.getElementById('live').textContent.includes('live')`)
	var kept string
	b.eval(t, `sessionStorage.getItem('sessiond.token')`, &kept)
	if kept != toks.readA {
		t.Errorf("sessionStorage token %q, want the reader's", kept)
	}
	if _, err := c.AppendMessages(withToken(ctx, toks.admin), &sessiondv1.AppendMessagesRequest{Ref: byID(nsA, id), Messages: []*sessiondv1.Message{
		textMsg("u2", sessiondv1.Role_ROLE_USER, "live with a token"),
	}}); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "the live append", `document.querySelectorAll('#messages > li').length === 6`)
	checkInert(t, b, titlePayload+" · sessiond", "live with a token")
	b.screenshot(t, "viewer-token.png")
}

// TestViewerEdgeCases: a session opens by its alias too; a session that
// does not exist and a namespace that cannot exist are reported on the
// page; and messages built to make a
// Markdown renderer or the browser's layout slow (tens of thousands of
// markers, deep quotes; one of 400,000 bytes) render promptly and whole,
// as text.
func TestViewerEdgeCases(t *testing.T) {
	d, base := startViewerDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	c := d.client(t)
	hostile := strings.Repeat("*a ", 10000) + strings.Repeat("_b ", 10000) + strings.Repeat("` ", 10000) + "\n\n" + strings.Repeat(">", 5000) + " deep"
	huge := strings.Repeat("` ", 200000)
	resp, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: viewerNS, Title: "hostile", Alias: "hostile-by-alias",
		Messages: []*sessiondv1.Message{textMsg("u1", sessiondv1.Role_ROLE_USER, hostile), textMsg("u2", sessiondv1.Role_ROLE_USER, huge)}})
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t)

	start := time.Now()
	b.run(t, "open the hostile session", chromedp.Navigate(base+"/ui/sessions/"+resp.GetSession().GetId()+"?namespace="+viewerNS))
	b.waitFor(t, "the hostile messages", `document.querySelectorAll('#messages > li').length === 2`)
	t.Logf("messages of %d and %d bytes rendered in %v", len(hostile), len(huge), time.Since(start))
	var got struct {
		Text, Huge    string
		Inline, Plain int
	}
	b.eval(t, `({
	  text: document.querySelector('#m-0 .md').textContent,
	  inline: document.querySelectorAll('#m-0 .md code, #m-0 .md em, #m-0 .md strong').length,
	  huge: document.querySelector('#m-1 .md .plain')?.textContent || '',
	  plain: document.querySelectorAll('#m-1 .md .plain-note').length,
	})`, &got)
	if !strings.Contains(got.Text, "*a *a *a") || !strings.Contains(got.Text, "_b _b") || !strings.Contains(got.Text, "deep") || len(got.Text) < 80000 {
		t.Errorf("the hostile message renders as %d bytes of text (%.60q...), want all of it", len(got.Text), got.Text)
	}
	if got.Inline > 2000 {
		t.Errorf("the hostile message made %d inline elements; the renderer stops at 2000", got.Inline)
	}
	if got.Huge != huge || got.Plain != 1 {
		t.Errorf("the 400,000-byte message: %d bytes as plain text, %d notes; want all of it, plain, with the note", len(got.Huge), got.Plain)
	}
	checkInert(t, b, "hostile · sessiond")

	// The same session by its alias, live as well.
	b.run(t, "open by alias", chromedp.Navigate(base+"/ui/sessions/hostile-by-alias?namespace="+viewerNS))
	b.waitFor(t, "the session by alias", `document.querySelectorAll('#messages > li').length === 2 && document.getElementById('live').textContent.includes('live')`)
	if _, err := c.AppendMessages(ctx, &sessiondv1.AppendMessagesRequest{Ref: byAlias(viewerNS, "hostile-by-alias"),
		Messages: []*sessiondv1.Message{textMsg("u3", sessiondv1.Role_ROLE_USER, "by alias")}}); err != nil {
		t.Fatal(err)
	}
	b.waitFor(t, "the append by alias", `document.querySelectorAll('#messages > li').length === 3`)

	b.run(t, "open a missing session", chromedp.Navigate(base+"/ui/sessions/01a20884-2dde-7d2b-8b68-248637676de0?namespace="+viewerNS))
	b.waitFor(t, "the not-found report", `document.getElementById('status').className === 'error' && /not found/i.test(document.getElementById('status').textContent)`)

	b.run(t, "open a bad namespace", chromedp.Navigate(base+"/ui/?namespace=.."))
	b.waitFor(t, "the bad-namespace report", `document.getElementById('status').textContent.includes('Not a namespace name')`)
	b.checkNoProblems(t)
}

// TestViewerMarkdown renders Markdown with the viewer's own renderer in
// the browser (imported as the page imports it) and compares the element
// tree: what each construct becomes, and that raw HTML, script URLs and
// unclosed markers stay text.
func TestViewerMarkdown(t *testing.T) {
	_, base := startViewerDaemon(t)
	b := newBrowser(t)
	b.run(t, "open the viewer", chromedp.Navigate(base+"/ui/"))
	tests := []struct{ src, want string }{
		{"plain text", "<p>plain text</p>"},
		{"line one\nline two", "<p>line one\nline two</p>"},
		{"# Title\n### Sub", "<h1>Title</h1><h3>Sub</h3>"},
		{"**bold**, *em*, _em_, ~~gone~~", "<p><strong>bold</strong>, <em>em</em>, <em>em</em>, <del>gone</del></p>"},
		{"snake_case_name and 2*3*4", "<p>snake_case_name and 2<em>3</em>4</p>"},
		{"**unclosed and *also", "<p>**unclosed and *also</p>"},
		{"`a <b> c` and ``x ` y``", "<p><code>a <b> c</code> and <code>x ` y</code></p>"},
		{"```js\nalert('<x>')\n```", "<pre><code data-lang=js>alert('<x>')</code></pre>"},
		{"    indented\n    code", "<pre><code>indented\ncode</code></pre>"},
		{"> quoted\n> more", "<blockquote><p>quoted\nmore</p></blockquote>"},
		{"- a\n- b\n  - c\n- d", "<ul><li>a</li><li><p>b</p><ul><li>c</li></ul></li><li>d</li></ul>"},
		{"3. three\n4. four", "<ol start=3><li>three</li><li>four</li></ol>"},
		{"| a | b |\n|:--|--:|\n| 1 | 2 |", "<div><table><thead><tr><th>a</th><th>b</th></tr></thead><tbody><tr><td>1</td><td>2</td></tr></tbody></table></div>"},
		{"---", "<hr></hr>"},
		{"[docs](https://example.com/d?x=1) and <https://a.example/b>", "<p><a href=https://example.com/d?x=1>docs</a> and <a href=https://a.example/b>https://a.example/b</a></p>"},
		{"see https://example.com/x.", "<p>see <a href=https://example.com/x>https://example.com/x</a>.</p>"},
		{"[bad](javascript:alert(1)) [rel](/v1/info) [data](data:text/html,x)", "<p><span>bad (javascript:alert(1)</span>) <span>rel (/v1/info)</span> <span>data (data:text/html,x)</span></p>"},
		{"![img](https://example.com/i.png)", "<p><a href=https://example.com/i.png>image: img</a></p>"},
		{"<script>alert(1)</script><img src=x onerror=alert(1)>", "<p><script>alert(1)</script><img src=x onerror=alert(1)></p>"},
	}
	for _, tc := range tests {
		var got string
		b.eval(t, `(async () => {
		  const {renderMarkdown} = await import('/ui/static/markdown.js');
		  const ser = (n) => n.nodeType === Node.TEXT_NODE ? n.data :
		    '<' + n.nodeName.toLowerCase() +
		    (n.getAttribute('href') ? ' href=' + n.getAttribute('href') : '') +
		    (n.dataset.lang ? ' data-lang=' + n.dataset.lang : '') +
		    (n.getAttribute('start') ? ' start=' + n.getAttribute('start') : '') +
		    '>' + [...n.childNodes].map(ser).join('') + '</' + n.nodeName.toLowerCase() + '>';
		  return [...renderMarkdown(`+jsString(tc.src)+`).childNodes].map(ser).join('');
		})()`, &got)
		if got != tc.want {
			t.Errorf("renderMarkdown(%q)\n got %s\nwant %s", tc.src, got, tc.want)
		}
	}
	b.checkNoProblems(t)
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestViewerBareSessionAndFirstMessageHit: a session with no title,
// summary or metadata shows its facts and nothing else (no "null" printed
// for the parts it lacks), and a search hit on a session's first message
// (proto3 JSON leaves message_index 0 out) says "message 1" and leads to
// that message.
func TestViewerBareSessionAndFirstMessageHit(t *testing.T) {
	d, base := startViewerDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	c := d.client(t)
	resp, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: viewerNS, Messages: []*sessiondv1.Message{
		textMsg("u1", sessiondv1.Role_ROLE_USER, "Where do zebras sleep?"),
		textMsg("a1", sessiondv1.Role_ROLE_ASSISTANT, "Standing up, mostly."),
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetId()
	b := newBrowser(t)

	b.run(t, "open the bare session", chromedp.Navigate(base+"/ui/sessions/"+id+"?namespace="+viewerNS))
	b.waitFor(t, "two messages", `document.querySelectorAll('#messages > li').length === 2`)
	var header struct {
		Text     string
		Sections []string
	}
	b.eval(t, `(() => { const hd = document.getElementById('session-header'); return {
	  text: hd.textContent, sections: [...hd.children].map((e) => e.tagName.toLowerCase() + (e.className ? '.' + e.className : ''))}; })()`, &header)
	if strings.Contains(header.Text, "null") || strings.Contains(header.Text, "undefined") {
		t.Errorf("the header of a session without summary or metadata reads %q", header.Text)
	}
	if want := "h1,dl.facts,div.labels,p.open-calls"; strings.Join(header.Sections, ",") != want {
		t.Errorf("header sections %q, want %s", header.Sections, want)
	}
	// No title was given: the first user message titles it.
	checkInert(t, b, "Where do zebras sleep? · sessiond", "Where do zebras sleep?", id)
	b.screenshot(t, "viewer-bare-session.png")

	b.run(t, "open the list", chromedp.Navigate(base+"/ui/?namespace="+viewerNS))
	b.waitFor(t, "the derived title, marked", `[...document.querySelectorAll('td.title.derived a')].some((a) => a.textContent === 'Where do zebras sleep?')`)

	b.run(t, "search the first message", chromedp.Navigate(base+"/ui/?namespace="+viewerNS+"&q=zebras"))
	b.waitFor(t, "the hit", `document.querySelectorAll('table.sessions tbody tr').length === 1`)
	var hit struct{ Href, Where, Snippet string }
	b.eval(t, `(() => { const r = document.querySelector('table.sessions tbody tr'); return {href: r.querySelector('a').getAttribute('href'), where: r.cells[1].textContent, snippet: r.cells[2].textContent}; })()`, &hit)
	if hit.Href != "/ui/sessions/"+id+"?namespace="+viewerNS+"#m-0" || hit.Where != "message 1" || !strings.Contains(hit.Snippet, "zebras") {
		t.Errorf("hit on message 0: %+v; want a link to #m-0, \"message 1\"", hit)
	}
	b.screenshot(t, "viewer-search-first-message.png")
	b.run(t, "follow the hit", chromedp.Click(chromedp.CSS("table.sessions tbody a")))
	b.waitFor(t, "the session at message 1", `location.hash === '#m-0' && document.querySelectorAll('#messages > li').length === 2 && document.querySelectorAll('#messages > li.target').length === 1 && !!document.querySelector('#m-0.target')`)

	// A hit on the title still says so, with no message to jump to.
	if _, err := c.UpdateSession(ctx, &sessiondv1.UpdateSessionRequest{Ref: byID(viewerNS, id),
		Session: &sessiondv1.Session{Title: "Okapi facts"}, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"title"}}}); err != nil {
		t.Fatal(err)
	}
	b.run(t, "search the title", chromedp.Navigate(base+"/ui/?namespace="+viewerNS+"&q=okapi"))
	b.waitFor(t, "the title hit", `document.querySelectorAll('table.sessions tbody tr').length === 1`)
	b.eval(t, `(() => { const r = document.querySelector('table.sessions tbody tr'); return {href: r.querySelector('a').getAttribute('href'), where: r.cells[1].textContent, snippet: r.cells[2].textContent}; })()`, &hit)
	if hit.Href != "/ui/sessions/"+id+"?namespace="+viewerNS || hit.Where != "title, alias or summary" {
		t.Errorf("hit on the title: %+v; want a link to the session's top", hit)
	}
	b.checkNoProblems(t)
}

// agentsItemMessage is a message as the OpenAI Agents adapter of
// clients/node stores an item: typed fields, the item's type in the
// metadata, and the whole item as JSON in parts[0] when the typed fields
// cannot hold all of it.
func agentsItemMessage(id string, m *sessiondv1.Message, itemType, itemJSON string) *sessiondv1.Message {
	m.Id, m.CreatedAt = id, fixedTime
	m.Metadata = map[string]string{"agents.item_type": itemType, "agents.item_encoding": "typed"}
	if itemJSON != "" {
		m.Metadata["agents.item_encoding"] = "json"
		m.Parts = append([]*sessiondv1.ContentPart{{Kind: &sessiondv1.ContentPart_Json{Json: itemJSON}}}, m.Parts...)
	}
	return m
}

// TestViewerAgentsSession: a session written through the agents adapter
// reads as a conversation (text, reasoning, the tool call beside its
// result), its raw items folded away one click from each message.
func TestViewerAgentsSession(t *testing.T) {
	d, base := startViewerDaemon(t)
	ctx := testContext(t, 3*time.Minute)
	c := d.client(t)
	call := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, ToolCalls: []*sessiondv1.ToolCall{{Id: "call_w1", Name: "get_weather", Arguments: `{"city":"Paris"}`}}}
	result := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_TOOL, ToolCallId: "call_w1", Name: "get_weather", Content: "18°C, sunny"}
	answer := &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Content: "It is **18°C** and sunny in Paris.", Model: "gpt-4.1-mini"}
	resp, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: viewerNS, Title: "Weather agent", Messages: []*sessiondv1.Message{
		agentsItemMessage("i1", &sessiondv1.Message{Role: sessiondv1.Role_ROLE_USER, Content: "What is the weather in Paris?"}, "message", ""),
		agentsItemMessage("i2", &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT, Reasoning: &sessiondv1.Reasoning{Text: "The user wants the weather: call the tool."}},
			"reasoning", `{"type":"reasoning","id":"rs_1","content":[{"type":"input_text","text":"The user wants the weather: call the tool."}]}`),
		agentsItemMessage("i3", call, "function_call", `{"type":"function_call","id":"fc_1","callId":"call_w1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"}`),
		agentsItemMessage("i4", result, "function_call_result", ""),
		agentsItemMessage("i5", &sessiondv1.Message{Role: sessiondv1.Role_ROLE_ASSISTANT}, "reasoning", `{"type":"reasoning","id":"rs_2","content":[],"providerData":{"encrypted_content":"gAAAA"}}`),
		agentsItemMessage("i6", answer, "message", `{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"It is **18°C** and sunny in Paris.","annotations":[]}]}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.GetSession().GetId()
	b := newBrowser(t)
	b.run(t, "open the agents session", chromedp.Navigate(base+"/ui/sessions/"+id+"?namespace="+viewerNS))
	b.waitFor(t, "six messages", `document.querySelectorAll('#messages > li').length === 6`)
	var got struct {
		Roles     []string
		Visible   string
		Reasoning string
		Strong    string
		Args      string
		Result    string
		Open      bool
		Raw       []bool
		ItemTypes []string
		Note      string
	}
	const readJS = `(() => {
	  const q = (s) => [...document.querySelectorAll(s)];
	  const pair = document.querySelector('.tool-pair[data-call-id=call_w1]');
	  return {
	    roles: q('#messages > li').map((li) => li.dataset.role),
	    visible: document.getElementById('messages').innerText,
	    reasoning: document.querySelector('#m-1 details.reasoning')?.textContent || '',
	    strong: document.querySelector('#m-5 .md strong')?.textContent || '',
	    args: pair?.querySelector('.arguments').textContent || '',
	    result: pair?.querySelector('.tool-result').textContent || '',
	    open: pair?.classList.contains('open') ?? true,
	    raw: q('#messages > li').map((li) => li.querySelector('details.raw-item')?.open ?? null),
	    itemTypes: q('#messages .item-type').map((e) => e.textContent),
	    note: document.querySelector('#m-4 .item-note')?.textContent || '',
	  };
	})()`
	b.eval(t, readJS, &got)
	if want := "user,assistant,assistant,tool,assistant,assistant"; strings.Join(got.Roles, ",") != want {
		t.Errorf("roles %q, want %s", got.Roles, want)
	}
	if !strings.Contains(got.Reasoning, "call the tool") || got.Strong != "18°C" || !strings.Contains(got.Args, `"city": "Paris"`) ||
		!strings.Contains(got.Result, "18°C, sunny") || got.Open {
		t.Errorf("conversation: reasoning %q, answer's strong %q, call args %q, result %q (open %v)", got.Reasoning, got.Strong, got.Args, got.Result, got.Open)
	}
	// The raw items (and the adapter's metadata) are there, folded.
	for _, leak := range []string{`"callId"`, `"type":`, "agents.item", "rs_1", "encrypted_content"} {
		if strings.Contains(got.Visible, leak) {
			t.Errorf("the conversation shows %q:\n%s", leak, got.Visible)
		}
	}
	if len(got.Raw) != 6 || slices.Contains(got.Raw, true) {
		t.Errorf("raw item folds per message %v, want six, all closed", got.Raw)
	}
	if want := "reasoning,function_call,function_call_result,reasoning"; strings.Join(got.ItemTypes, ",") != want {
		t.Errorf("item types %q, want %s", got.ItemTypes, want)
	}
	if got.Note != "reasoning" {
		t.Errorf("an item no typed field shows: note %q, want its type", got.Note)
	}
	checkInert(t, b, "Weather agent · sessiond", "What is the weather in Paris?")
	b.screenshot(t, "viewer-agents-session.png")

	b.run(t, "open a raw item", chromedp.Click(chromedp.CSS("#m-2 details.raw-item > summary")))
	var raw string
	b.eval(t, `document.querySelector('#m-2 details.raw-item[open] pre')?.textContent || ''`, &raw)
	if !strings.Contains(raw, `"id": "fc_1"`) || !strings.Contains(raw, `"callId": "call_w1"`) {
		t.Errorf("the raw item of the call reads %q, want the stored item, pretty", raw)
	}
	b.screenshot(t, "viewer-agents-raw-item.png")
	b.checkNoProblems(t)
}

// TestViewerNamespacePicker: with tokens on, the picker lists the
// namespaces the token may read (from GetServerInfo), opens the first when
// the default one is not among them, and switches namespace; a token for
// every namespace keeps the free field.
func TestViewerNamespacePicker(t *testing.T) {
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	twoNS, err := auth.AddToken(toks.file, "reader-ab", []string{nsA, nsB}, auth.RoleRead)
	if err != nil {
		t.Fatal(err)
	}
	d, base := startViewerDaemon(t, "--auth-tokens", toks.file)
	ctx := withToken(testContext(t, 3*time.Minute), toks.admin)
	c := d.client(t)
	for _, ns := range []string{nsA, nsB} {
		if _, err := c.CreateSession(ctx, &sessiondv1.CreateSessionRequest{Namespace: ns, Title: "in " + ns}); err != nil {
			t.Fatal(err)
		}
	}

	b := newBrowser(t)
	b.run(t, "open the viewer", chromedp.Navigate(base+"/"))
	b.waitFor(t, "the token prompt", `location.pathname === '/ui/' && document.getElementById('status').textContent.includes('needs a token')`)
	b.run(t, "enter a token of two namespaces",
		chromedp.SendKeys(chromedp.CSS("#token"), twoNS),
		chromedp.Click(chromedp.CSS("#token-use")))
	b.waitFor(t, "the first namespace of the token", `new URLSearchParams(location.search).get('namespace') === 'team-a' &&
	  document.querySelector('table.sessions tbody tr')?.cells[0].textContent === 'in team-a' && !document.getElementById('ns-select').hidden`)
	var picker struct {
		Options         []string
		Selected, State string
		InputHidden     bool
	}
	const pickerJS = `(() => { const s = document.getElementById('ns-select'); return {
	  options: [...s.options].map((o) => o.value), selected: s.value, state: document.getElementById('token-state').textContent,
	  inputHidden: document.getElementById('ns').hidden}; })()`
	b.eval(t, pickerJS, &picker)
	if strings.Join(picker.Options, ",") != "team-a,team-b" || picker.Selected != "team-a" || !picker.InputHidden ||
		picker.State != "token reader-ab (read: team-a, team-b)" {
		t.Errorf("picker %+v; want team-a (selected) and team-b in place of the field, and the token's scope", picker)
	}
	b.screenshot(t, "viewer-namespace-picker.png")
	var ok bool
	b.eval(t, `(() => { const s = document.getElementById('ns-select'); s.value = 'team-b'; s.dispatchEvent(new Event('change')); return true; })()`, &ok)
	b.waitFor(t, "the other namespace", `new URLSearchParams(location.search).get('namespace') === 'team-b' &&
	  document.querySelector('table.sessions tbody tr')?.cells[0].textContent === 'in team-b' && document.getElementById('ns-select').value === 'team-b'`)

	// A token for every namespace: the free field.
	b.run(t, "enter the admin token",
		chromedp.SendKeys(chromedp.CSS("#token"), toks.admin),
		chromedp.Click(chromedp.CSS("#token-use")))
	b.waitFor(t, "the free field", `document.getElementById('token-state').textContent === 'token ops (admin: every namespace)' &&
	  document.getElementById('ns-select').hidden && !document.getElementById('ns').hidden`)
	b.checkNoProblems(t)
}
