package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Browser access across origins (CORS) is opt-in: Config.CORSOrigins (DSHD_CORS_ORIGINS) lists
// the origins whose pages may call the API. The dashboard at "/" is same-origin and needs none.
//
// Preflights are answered here, before routing and authentication (a preflight carries no
// credentials): 204 with the allowed methods and headers for a listed origin, 403
// origin_not_allowed for any other. Other requests from a listed origin get
// Access-Control-Allow-Origin; requests from other origins are served without it, so the browser
// keeps their answers from the page. No cookies are involved (credentials are bearer tokens), so
// Access-Control-Allow-Credentials is never sent.
const (
	corsMethods = "GET, POST, PUT, PATCH, DELETE"
	// Last-Event-ID is what an EventSource sends when it reconnects; Idempotency-Key makes a post
	// retryable; X-Request-Id correlates a request with the server's log; traceparent and
	// tracestate (W3C Trace Context) are what a page's tracing library adds to every request, so
	// a preflight must allow them (the server does not join a page's trace yet).
	corsHeaders = "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, Cache-Control, X-Request-Id, traceparent, tracestate"
	// What a page may read beside the safelisted headers: Location of a create, Retry-After of a
	// 429 or 503, the RateLimit-* of a tenant's rate (usage.go), and Idempotent-Replayed, which
	// tells that a create's answer is a replay (idempotency.go).
	corsExposed = "X-Request-Id, WWW-Authenticate, Location, Retry-After, RateLimit-Limit, RateLimit-Remaining, " +
		"RateLimit-Reset, RateLimit-Policy, Idempotent-Replayed"
	corsMaxAge = "600"
)

// ParseOrigins checks a DSHD_CORS_ORIGINS list: every entry is an origin, scheme://host[:port]
// with scheme http or https and nothing after the host. "*" is refused: the list is an
// allow-list.
func ParseOrigins(list []string) ([]string, error) {
	var out []string
	for _, o := range list {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		u, err := url.Parse(o)
		if o == "*" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("%q is not an origin: want scheme://host[:port], such as https://app.example.com", o)
		}
		out = append(out, strings.ToLower(u.Scheme+"://"+u.Host))
	}
	return out, nil
}

// cors is the CORS middleware; it runs before routing and authentication.
func (s *Server) cors(next http.Handler) http.Handler {
	allowed := map[string]bool{}
	for _, o := range s.cfg.CORSOrigins {
		allowed[strings.ToLower(strings.TrimSuffix(o, "/"))] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Origin")
		ok := allowed[strings.ToLower(origin)]
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Access-Control-Request-Method, Access-Control-Request-Headers")
			if !ok {
				writeProblem(w, CodeOriginNotAllowed, "this origin may not call the API from a browser (the server's DSHD_CORS_ORIGINS does not list it)")
				return
			}
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Methods", corsMethods)
			h.Set("Access-Control-Allow-Headers", corsHeaders)
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if ok {
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Expose-Headers", corsExposed)
		}
		next.ServeHTTP(w, r)
	})
}
