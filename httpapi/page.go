package httpapi

import (
	"embed"
	"io/fs"
	"net/http"
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

func servePage(w http.ResponseWriter, name string) {
	body, err := webFiles.ReadFile("web/" + name)
	if err != nil {
		http.Error(w, "missing page", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:")
	h.Set("X-Content-Type-Options", "nosniff")
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

func getStatic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=300")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	static.ServeHTTP(w, r)
}
