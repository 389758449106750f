package main

import (
	"embed"
	"io/fs"
	"net/http"
)

// The operator page: plain HTML, CSS and a little JavaScript, embedded in
// the binary. It holds no data of its own; everything it shows comes from
// the API with the caller's token.

//go:embed static
var staticFiles embed.FS

// pagePolicy is the page's Content-Security-Policy: only our own script and
// style run (no inline code, so injected markup cannot execute), and fetch
// may also reach S3, whose origin depends on the configuration.
const pagePolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self' http: https:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

func registerPage(mux *http.ServeMux) {
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	index, err := fs.ReadFile(static, "index.html")
	if err != nil {
		panic(err)
	}
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	mux.Handle("GET /{$}", pageHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(index)
	})))
	mux.Handle("GET /static/", pageHeaders(files))
}

func pageHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", pagePolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}
