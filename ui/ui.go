// Package ui serves sessiond's conversation viewer: a few static files
// (HTML, CSS and JavaScript, embedded with go:embed; no build step, nothing
// fetched from elsewhere) that read the daemon's JSON API under /v1/ from the
// browser, with whatever token the person supplies. Mount [Handler] at
// [Prefix] on the HTTP listener that serves /v1/:
//
//	mux.Handle(ui.Prefix, ui.Handler())
//
// docs/viewer.md lists its pages and its security: stored text goes into
// text nodes only, and every answer carries a Content-Security-Policy that
// requires Trusted Types, so the browser itself refuses any HTML string sink.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strings"
	"time"
)

// Prefix is the path the viewer is served under.
const Prefix = "/ui/"

// ContentSecurityPolicy is the policy every answer of the handler carries.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

//go:embed static
var staticFS embed.FS

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// handler serves the embedded files; see the package doc.
type handler struct {
	index  asset
	static map[string]asset // by file name under /ui/static/
}

// sessionPath matches /ui/sessions/{id}: the id or alias of a session, as
// the daemon's names allow (letters, digits, ".", "_", "-"; at most 128).
var sessionPath = regexp.MustCompile(`^/ui/sessions/[A-Za-z0-9._-]{1,128}$`)

// Handler returns the viewer's handler, to mount at [Prefix]. It answers
// GET and HEAD only; any other method is 405.
func Handler() http.Handler {
	h := &handler{static: map[string]asset{}}
	err := fs.WalkDir(staticFS, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := staticFS.ReadFile(p)
		if err != nil {
			return err
		}
		ct := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) {
		// Not left to the system's MIME table, which may lack them or
		// say otherwise: a module script must be served as JavaScript.
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".html":
			ct = "text/html; charset=utf-8"
		}
		sum := sha256.Sum256(b)
		a := asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		if p == "static/index.html" {
			h.index = a
		} else {
			h.static[strings.TrimPrefix(p, "static/")] = a
		}
		return nil
	})
	if err != nil || h.index.body == nil {
		// The files are compiled in: this cannot fail at run time.
		panic(fmt.Sprintf("ui: embedded files unreadable: %v", err))
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", ContentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "ui: method "+r.Method+" not allowed; the viewer is read-only (GET, HEAD)", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	switch {
	case p == "/ui":
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
	case p == Prefix || sessionPath.MatchString(p):
		h.serve(w, r, h.index)
	case strings.HasPrefix(p, Prefix+"static/"):
		a, ok := h.static[strings.TrimPrefix(p, Prefix+"static/")]
		if !ok {
			http.Error(w, "ui: no such file: "+p, http.StatusNotFound)
			return
		}
		h.serve(w, r, a)
	default:
		http.Error(w, "ui: no such page: "+p+" (the viewer has "+Prefix+" and "+Prefix+"sessions/{id})", http.StatusNotFound)
	}
}

// serve answers with a, revalidated by its ETag: the files change only
// with the binary, but a new binary must never be shadowed by a cached
// file.
func (h *handler) serve(w http.ResponseWriter, r *http.Request, a asset) {
	hd := w.Header()
	hd.Set("Content-Type", a.contentType)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
