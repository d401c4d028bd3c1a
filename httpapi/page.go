package httpapi

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// The seat-map page: GET / (an index), GET /shows/{show} (the venue drawn from its
// layout, live from the event stream, with hold, confirm and release as a demo holder)
// and its static files under /static/. Plain HTML, CSS and JavaScript, embedded: no CDN
// and no build step.

//go:embed web
var webFiles embed.FS

// static serves the page's files (app.js, app.css), cacheable for a short while.
var static = func() http.Handler {
	sub, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err)
	}
	return http.StripPrefix("/static/", http.FileServerFS(sub))
}()

// pageCSP is the Content-Security-Policy of every HTML response: the page's own
// scripts and styles only, and no origin may frame it (no clickjacking).
const pageCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

func servePage(w http.ResponseWriter, name string) {
	body, err := webFiles.ReadFile("web/" + name)
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, "internal", "Internal error", "the page is missing from this build")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", pageCSP)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func (s *Server) getIndex(w http.ResponseWriter, _ *http.Request) { servePage(w, "index.html") }

// getShowPage serves the seat-map page of a show that exists (404 otherwise).
func (s *Server) getShowPage(w http.ResponseWriter, r *http.Request) {
	if _, err := s.e.Layout(r.Context(), r.PathValue("show")); err != nil {
		s.fail(w, r, err)
		return
	}
	servePage(w, "show.html")
}

// getStatic serves the page's files; anything else is a 404 problem (not the file
// server's text/plain one).
func getStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	f, err := webFiles.Open("web/" + name)
	if err != nil || strings.HasSuffix(name, ".html") {
		writeProblem(w, http.StatusNotFound, "no-such-route", "No such route", "no static file "+name)
		return
	}
	_ = f.Close()
	w.Header().Set("Cache-Control", "public, max-age=300")
	static.ServeHTTP(w, r)
}
