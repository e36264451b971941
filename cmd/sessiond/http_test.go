package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// httpAddrOf waits for the daemon's "serving JSON over HTTP" line (logged
// before "sessiond started") and returns its address.
func httpAddrOf(t *testing.T, d *daemon) string {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(d.stderr.String()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "serving JSON over HTTP" {
			return line["http_addr"].(string)
		}
	}
	t.Fatalf("no \"serving JSON over HTTP\" line:\n%s", d.stderr.String())
	return ""
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHTTPListenMountsAndStops serves --http-listen on a unix socket: the
// API answers, a handler given to mountHTTP is served beside it, and the
// daemon stops cleanly.
func TestHTTPListenMountsAndStops(t *testing.T) {
	old := httpMounts
	t.Cleanup(func() { httpMounts = old })
	mountHTTP("/mounted/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "mounted "+r.URL.Path)
	}))
	sock := filepath.Join(t.TempDir(), "http.sock")
	d := start(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--http-listen", "unix:"+sock)
	if a := httpAddrOf(t, d); a != "unix:"+sock {
		t.Fatalf("http_addr %q, want unix:%s", a, sock)
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	if code, body := get(t, c, "http://sessiond/v1/info"); code != 200 || !strings.Contains(body, `"backend":"file"`) {
		t.Errorf("GET /v1/info: %d %s", code, body)
	}
	if code, body := get(t, c, "http://sessiond/mounted/page"); code != 200 || body != "mounted /mounted/page" {
		t.Errorf("GET /mounted/page: %d %q", code, body)
	}
	if err := d.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if !strings.Contains(d.stderr.String(), "sessiond stopped") {
		t.Errorf("no clean stop in the log:\n%s", d.stderr.String())
	}
}

func TestHTTPListenConfig(t *testing.T) {
	cfg, err := parseConfig(nil, env(map[string]string{"HOME": t.TempDir(), "SESSIOND_HTTP_LISTEN": "127.0.0.1:7438"}), io.Discard)
	if err != nil || cfg.http.listen != "127.0.0.1:7438" {
		t.Fatalf("SESSIOND_HTTP_LISTEN: %v, %+v", err, cfg)
	}
	for _, args := range [][]string{
		{"--http-listen", "nowhere"},
		{"--http-listen", "unix:"},
		{"--http-listen", "127.0.0.1:7437"},
	} {
		if _, err := parseConfig(args, env(map[string]string{"HOME": t.TempDir()}), io.Discard); err == nil || !strings.Contains(err.Error(), "--http-listen") {
			t.Errorf("%v: %v, want a usage error naming --http-listen", args, err)
		}
	}
}

// TestHTTPListenLeadsToViewer: on a TCP --http-listen the start-up log
// names the viewer's URL, which serves the viewer, and the listener's root
// redirects to it; a unix socket logs no URL.
func TestHTTPListenLeadsToViewer(t *testing.T) {
	d := start(t, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--http-listen", "127.0.0.1:0")
	addr := httpAddrOf(t, d)
	var viewer string
	sc := bufio.NewScanner(strings.NewReader(d.stderr.String()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["msg"] == "serving JSON over HTTP" {
			viewer, _ = line["viewer_url"].(string)
		}
	}
	if want := "http://" + addr + "/ui/"; viewer != want {
		t.Fatalf("viewer_url %q, want %q", viewer, want)
	}
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if code, body := get(t, c, viewer); code != 200 || !strings.Contains(body, "/ui/static/app.js") {
		t.Errorf("GET %s: %d %.80q, want the viewer's page", viewer, code, body)
	}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /: %d Location %q, want 302 to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Only the root itself: another path is still not found.
	if code, _ := get(t, c, "http://"+addr+"/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope: %d, want 404", code)
	}
}

func TestViewerURL(t *testing.T) {
	host, _ := os.Hostname()
	for _, tc := range []struct {
		addr string
		tls  bool
		want string
	}{
		{"127.0.0.1:7438", false, "http://127.0.0.1:7438/ui/"},
		{"[::1]:7438", true, "https://[::1]:7438/ui/"},
		{"0.0.0.0:7438", true, "https://" + net.JoinHostPort(host, "7438") + "/ui/"},
		{"unix:/run/sessiond/http.sock", false, ""},
	} {
		if got := viewerURL(tc.addr, tc.tls); got != tc.want {
			t.Errorf("viewerURL(%q, %v) = %q, want %q", tc.addr, tc.tls, got, tc.want)
		}
	}
}
