// Package web holds the browser dashboard, embedded in the binary and served at "/". For now it is
// a single page pointing at the API; the dashboard comes later.
package web

import (
	_ "embed"
	"net/http"
)

//go:embed index.html
var index []byte

// Handler serves the dashboard's index page.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(index)
	})
}
