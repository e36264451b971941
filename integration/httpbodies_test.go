package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawPost sends a POST to path on addr over a connection of its own:
// headers first (with Content-Length declared, or chunked when declared is
// negative), then up to sent bytes of body from a generator (never held in
// memory), while the answer is read at the same time. It returns the
// answer's status and body, or an error when none came within wait.
type rawAnswer struct {
	status int
	header http.Header
	body   string
	err    error
}

func rawPost(addr, path, token string, declared, sent int64, wait time.Duration) rawAnswer {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return rawAnswer{err: err}
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(wait))
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n", path, addr)
	if token != "" {
		fmt.Fprintf(&hdr, "Authorization: Bearer %s\r\n", token)
	}
	if declared >= 0 {
		fmt.Fprintf(&hdr, "Content-Length: %d\r\n\r\n", declared)
	} else {
		hdr.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	}
	if _, err := io.WriteString(conn, hdr.String()); err != nil {
		return rawAnswer{err: err}
	}
	go func() {
		// A JSON string of 'x's: valid as far as it goes, so that only
		// its size and its caller matter.
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		first := append([]byte(`{"title": "`), chunk[11:]...)
		for n := int64(0); n < sent; n += int64(len(chunk)) {
			b := chunk[:min(int64(len(chunk)), sent-n)]
			if n == 0 {
				b = first[:len(b)]
			}
			if declared < 0 {
				b = fmt.Appendf(nil, "%x\r\n%s\r\n", len(b), b)
			}
			if _, err := conn.Write(b); err != nil {
				return // the server answered and closed: expected
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return rawAnswer{err: err}
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return rawAnswer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// daemonRSS is the resident set of the test's sessiond child whose command
// line names dataDir, from /proc/PID/status.
func daemonRSS(t *testing.T, dataDir string) int64 {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(dataDir)) || !bytes.Contains(cmdline, []byte("sessiond")) {
			continue
		}
		st, err := os.ReadFile(filepath.Join(p, "status"))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(st)) {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				if err != nil {
					t.Fatalf("%s/status: %q: %v", p, line, err)
				}
				return kb << 10
			}
		}
	}
	t.Fatalf("no sessiond process for %s in /proc", dataDir)
	return 0
}

// TestHTTPBodyAfterToken: with --auth-tokens, three concurrent 100 MB
// POSTs without a token, then three with an unknown one, are answered 401
// before their bodies are read, and the daemon's resident memory grows by
// less than 64 MiB.
func TestHTTPBodyAfterToken(t *testing.T) {
	dir := t.TempDir()
	toks := newTestTokens(t, dir)
	dataDir := filepath.Join(dir, "data")
	d, _ := startHTTPDaemon(t, dataDir, "--auth-tokens", toks.file)
	addr := httpAddr(t, d)
	before := daemonRSS(t, dataDir)
	const size = 100_000_000
	for _, token := range []string{"", "not-a-token"} {
		var wg sync.WaitGroup
		answers := make([]rawAnswer, 3)
		for i := range answers {
			wg.Go(func() { answers[i] = rawPost(addr, "/v1/sessions", token, size, size, 30*time.Second) })
		}
		wg.Wait()
		for i, a := range answers {
			if a.err != nil || a.status != http.StatusUnauthorized {
				t.Errorf("token %q, POST %d: status %d, error %v (%s), want 401", token, i, a.status, a.err, a.body)
			} else if a.header.Get("WWW-Authenticate") == "" {
				t.Errorf("token %q, POST %d: 401 without WWW-Authenticate", token, i)
			}
		}
	}
	after := daemonRSS(t, dataDir)
	t.Logf("daemon RSS %d MiB before, %d MiB after", before>>20, after>>20)
	if grew := after - before; grew >= 64<<20 {
		t.Errorf("daemon RSS grew by %d MiB (%d -> %d MiB), want under 64 MiB", grew>>20, before>>20, after>>20)
	}
	// A caller with a token still gets through.
	if a := rawPost(addr, "/v1/sessions", toks.writeA, 2, 2, 10*time.Second); a.err != nil || a.status == http.StatusUnauthorized {
		t.Errorf("POST with a valid token: status %d, error %v (%s)", a.status, a.err, a.body)
	}
}

// TestHTTPBodyOverLimitAtOnce: a body whose declared length is over the
// limit is answered 413 from its headers, without waiting for the body.
func TestHTTPBodyOverLimitAtOnce(t *testing.T) {
	d, _ := startHTTPDaemon(t, t.TempDir())
	a := rawPost(httpAddr(t, d), "/v1/sessions", "", 1<<30, 0, 10*time.Second)
	if a.err != nil || a.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("POST declaring 1 GiB, body unsent: status %d, error %v (%s), want 413 at once", a.status, a.err, a.body)
	}
	if !strings.Contains(a.body, "limit") {
		t.Errorf("413 body %q does not name the limit", a.body)
	}
}

// TestHTTPLargeBodiesInFlight: while four large bodies are being received,
// a fifth is answered 429 at once; small bodies still go through, and a
// large one does again once the others are gone.
func TestHTTPLargeBodiesInFlight(t *testing.T) {
	d, h := startHTTPDaemon(t, t.TempDir())
	addr := httpAddr(t, d)
	// Four slow senders: 100 MB declared, 1 MiB sent, then silence until
	// the test ends.
	var conns []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/sessions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n{\"title\": \"%s", addr, strings.Repeat("x", 1<<20))
	}
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	t.Cleanup(closeAll)
	time.Sleep(500 * time.Millisecond) // let the daemon take them in
	a := rawPost(addr, "/v1/sessions", "", 100_000_000, 100_000_000, 10*time.Second)
	if a.err != nil || a.status != http.StatusTooManyRequests {
		t.Fatalf("fifth large POST: status %d, error %v (%s), want 429 at once", a.status, a.err, a.body)
	}
	if !strings.Contains(a.body, "in progress") {
		t.Errorf("429 body %q does not say why", a.body)
	}
	h.call(t, "POST", "/v1/sessions", `{"alias": "small"}`, nil)
	closeAll()
	waitFor(t, func() bool {
		a := rawPost(addr, "/v1/sessions", "", 2<<20, 2<<20, 10*time.Second)
		return a.err == nil && a.status != http.StatusTooManyRequests
	}, "a large POST taken in once the others are gone")
}

// TestHTTPNoSniff: /v1/ answers, errors included, carry
// X-Content-Type-Options: nosniff.
func TestHTTPNoSniff(t *testing.T) {
	_, h := startHTTPDaemon(t, t.TempDir())
	for _, path := range []string{"/v1/info", "/v1/sessions/nope", "/v1/openapi.json"} {
		resp, _ := h.do(t, "GET", path, "")
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("GET %s (%d): X-Content-Type-Options %q, want nosniff", path, resp.StatusCode, got)
		}
	}
}
