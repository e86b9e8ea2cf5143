// Package console serves the admin console: the single-page app built
// from console/src by Vite into console/dist, embedded in the binary, so
// `rivora dev` and `rivora controlplane` serve it at /console/ with no
// npm step. It owns no state: the app talks to the same Connect API with
// the token the operator signs in with.
package console

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed all:dist
var dist embed.FS

// Prefix is where the console is served.
const Prefix = "/console/"

// csp allows only the console's own scripts, styles and API calls; the app
// uses no inline script or style (Vite emits files).
const csp = "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// Handler serves the console under /console/: hashed assets with an
// immutable cache lifetime, index.html (never cached) for every other path
// that is not a file, so the app's routes survive a reload, and 404 for a
// missing asset. GET /console redirects to /console/.
func Handler() http.Handler {
	files, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed pattern guarantees dist exists
	}
	index, err := fs.ReadFile(files, "index.html")
	if err != nil {
		panic("console: dist/index.html missing; run `make console-check`: " + err.Error())
	}
	return &handler{files: files, index: index}
}

type handler struct {
	files fs.FS
	index []byte
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == strings.TrimSuffix(Prefix, "/") {
		http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
		return
	}
	name, ok := strings.CutPrefix(path.Clean(r.URL.Path), strings.TrimSuffix(Prefix, "/"))
	if !ok {
		http.NotFound(w, r)
		return
	}
	name = strings.TrimPrefix(name, "/")
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", csp)
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("X-Frame-Options", "DENY")
	if name != "" && name != "index.html" {
		if b, err := fs.ReadFile(h.files, name); err == nil {
			if strings.HasPrefix(name, "assets/") {
				hdr.Set("Cache-Control", "public, max-age=31536000, immutable")
			} else {
				hdr.Set("Cache-Control", "no-cache")
			}
			http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
			return
		}
		// A missing file (an old asset hash, a typo) is a 404, not the app:
		// a script answered with HTML fails in confusing ways.
		if strings.HasPrefix(name, "assets/") || path.Ext(name) != "" {
			http.NotFound(w, r)
			return
		}
	}
	hdr.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(h.index))
}
