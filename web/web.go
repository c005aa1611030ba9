// Package web holds the browser dashboard, embedded in the binary and served at "/": plain HTML,
// CSS and one JavaScript module, with no build step and no Node.js at run time. index.html is
// the shell; style.css and app.js are inlined into it once, at start, so the dashboard is one
// response, and a Content-Security-Policy allows exactly those two inline blocks (by hash) and
// requests to this origin only.
//
// The dashboard signs in with an API key kept in sessionStorage (never localStorage, never a
// cookie) and follows sessions with stream tokens (api/tokens.go). web/test holds its browser
// test (Playwright driving Debian's Chromium; internal/e2e runs it).
package web

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"strings"
)

var (
	//go:embed index.html
	shell string
	//go:embed style.css
	style string
	//go:embed app.js
	script string
)

var page, csp = build()

func build() ([]byte, string) {
	// The inlined text must not end its element early.
	if strings.Contains(strings.ToLower(script), "</script") || strings.Contains(strings.ToLower(style), "</style") {
		panic("web: app.js or style.css contains a closing tag")
	}
	html := strings.Replace(shell, "/*STYLE*/", style, 1)
	html = strings.Replace(html, "/*SCRIPT*/", script, 1)
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	policy := "default-src 'none'; script-src " + hash(script) + "; style-src " + hash(style) +
		"; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	return []byte(html), policy
}

// Handler serves the dashboard's page.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(page)
	})
}
