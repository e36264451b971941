package ui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, target string, header map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestHandlerRoutes(t *testing.T) {
	h := Handler()
	index, err := staticFS.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path string
		code         int
		ctype        string // prefix of Content-Type
		body         string // the whole body, when set
	}{
		{"GET", "/ui/", 200, "text/html", string(index)},
		{"GET", "/ui/?namespace=team-a&q=x", 200, "text/html", string(index)},
		{"GET", "/ui/sessions/0199a6d2-5a1e-7c3b-9f00-3d2b1c0a9e8f", 200, "text/html", string(index)},
		{"GET", "/ui/sessions/my-alias?namespace=ns", 200, "text/html", string(index)},
		{"HEAD", "/ui/sessions/0199a6d2-5a1e-7c3b-9f00-3d2b1c0a9e8f", 200, "text/html", ""},
		{"GET", "/ui/static/app.js", 200, "text/javascript", ""},
		{"GET", "/ui/static/markdown.js", 200, "text/javascript", ""},
		{"GET", "/ui/static/app.css", 200, "text/css", ""},
		{"GET", "/ui/static/index.html", 404, "text/plain", ""},
		{"GET", "/ui/static/nope.js", 404, "text/plain", ""},
		{"GET", "/ui/static/", 404, "text/plain", ""},
		{"GET", "/ui/sessions/", 404, "text/plain", ""},
		{"GET", "/ui/sessions/a/b", 404, "text/plain", ""},
		{"GET", "/ui/sessions/a%3Cb", 404, "text/plain", ""},
		{"GET", "/ui/index.html", 404, "text/plain", ""},
		{"GET", "/ui/../v1/sessions", 404, "text/plain", ""},
		{"POST", "/ui/", 405, "text/plain", ""},
		{"DELETE", "/ui/sessions/x", 405, "text/plain", ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := get(t, h, tc.method, tc.path, nil)
			if rec.Code != tc.code {
				t.Fatalf("status %d, want %d; body %q", rec.Code, tc.code, rec.Body.String())
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tc.ctype) {
				t.Errorf("Content-Type %q, want %s...", ct, tc.ctype)
			}
			if tc.body != "" && rec.Body.String() != tc.body {
				t.Errorf("body is not index.html:\n%s", rec.Body.String())
			}
			if tc.method == "HEAD" && rec.Body.Len() != 0 {
				t.Errorf("HEAD answered a body of %d bytes", rec.Body.Len())
			}
			if tc.code == 405 && rec.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("405 without Allow: GET, HEAD (got %q)", rec.Header().Get("Allow"))
			}
			// Every answer, errors included, carries the security headers.
			wantHeaders := map[string]string{
				"Content-Security-Policy": ContentSecurityPolicy,
				"X-Content-Type-Options":  "nosniff",
				"X-Frame-Options":         "DENY",
				"Referrer-Policy":         "no-referrer",
			}
			for k, v := range wantHeaders {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
}

func TestHandlerRedirectsBarePrefix(t *testing.T) {
	rec := get(t, Handler(), "GET", "/ui", nil)
	if rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/ui/" {
		t.Fatalf("GET /ui: %d Location %q, want 301 to /ui/", rec.Code, rec.Header().Get("Location"))
	}
}

func TestHandlerRevalidatesByETag(t *testing.T) {
	h := Handler()
	rec := get(t, h, "GET", "/ui/static/app.js", nil)
	etag := rec.Header().Get("ETag")
	if etag == "" || rec.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q; want an ETag and no-cache", etag, rec.Header().Get("Cache-Control"))
	}
	if rec := get(t, h, "GET", "/ui/static/app.js", map[string]string{"If-None-Match": etag}); rec.Code != http.StatusNotModified {
		t.Errorf("If-None-Match with the current ETag: %d, want 304", rec.Code)
	}
	if other := get(t, h, "GET", "/ui/static/app.css", nil).Header().Get("ETag"); other == etag {
		t.Errorf("app.css and app.js share the ETag %s", etag)
	}
}

func TestContentSecurityPolicyIsStrict(t *testing.T) {
	directives := map[string]string{}
	for _, d := range strings.Split(ContentSecurityPolicy, ";") {
		f := strings.Fields(d)
		if len(f) > 0 {
			directives[f[0]] = strings.Join(f[1:], " ")
		}
	}
	want := map[string]string{
		"default-src":               "'none'",
		"script-src":                "'self'",
		"style-src":                 "'self'",
		"connect-src":               "'self'",
		"img-src":                   "'self' data:",
		"frame-ancestors":           "'none'",
		"base-uri":                  "'none'",
		"require-trusted-types-for": "'script'",
	}
	for k, v := range want {
		if directives[k] != v {
			t.Errorf("CSP %s = %q, want %q", k, directives[k], v)
		}
	}
	if strings.Contains(ContentSecurityPolicy, "unsafe") {
		t.Errorf("CSP allows something unsafe: %s", ContentSecurityPolicy)
	}
}

// TestStaticFilesNeedNoInlineCode checks what the CSP would otherwise break
// at run time, and what would let stored text become markup: the page
// loads only its own files, has no inline script, style or event handler,
// and the scripts use no HTML string sink or string evaluation.
func TestStaticFilesNeedNoInlineCode(t *testing.T) {
	index, err := staticFS.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	html := string(index)
	for _, re := range []string{`<script(?:\s[^>]*)?>\s*[^<\s]`, `<style`, `\sstyle=`, `\son[a-z]+=`, `(?:src|href)="(?:https?:)?//`} {
		if m := regexp.MustCompile(re).FindString(html); m != "" {
			t.Errorf("index.html has %q (matches %s)", m, re)
		}
	}
	// Every file the page names is embedded.
	h := Handler()
	for _, m := range regexp.MustCompile(`(?:src|href)="(/ui/static/[^"]+)"`).FindAllStringSubmatch(html, -1) {
		if rec := get(t, h, "GET", m[1], nil); rec.Code != 200 {
			t.Errorf("index.html names %s, which answers %d", m[1], rec.Code)
		}
	}
	sinks := regexp.MustCompile(`\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|createContextualFragment|DOMParser|srcdoc|setTimeout\(\s*['"]|setInterval\(\s*['"]`)
	err = fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(p, ".js") {
			return err
		}
		b, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range sinks.FindAllString(string(b), -1) {
			t.Errorf("%s uses %s", p, m)
		}
		// Module imports resolve to embedded files.
		for _, m := range regexp.MustCompile(`from '\./([^']+)'`).FindAllStringSubmatch(string(b), -1) {
			if rec := get(t, h, "GET", Prefix+"static/"+m[1], nil); rec.Code != 200 {
				t.Errorf("%s imports %s, which answers %d", p, m[1], rec.Code)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
