package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
)

// admit bounds the requests in flight that have not authenticated (Config.MaxUnauthenticated):
// each takes a slot, which authenticate and adminOnly give back as soon as the key or token is
// proved, and the end of the request otherwise. Without a free slot the request answers 503
// server_busy at once, so neither a flood of keyless requests nor a database that answers key
// lookups slowly piles up requests. GET /healthz takes no slot: liveness is never refused.
func (s *Server) admit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		select {
		case s.unauth <- struct{}{}:
		default:
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			writeProblem(w, CodeServerBusy, "too many unauthenticated requests in flight; retry shortly")
			return
		}
		var once sync.Once
		ri := info(r)
		ri.release = func() { once.Do(func() { <-s.unauth }) }
		defer ri.authenticated()
		next.ServeHTTP(w, r)
	})
}

// guardBody bounds the reading of a request body by Config.BodyReadTimeout from the start of the
// request, so that a body trickled a byte at a time holds a handler (and a connection) for that
// long at most: reading past the deadline fails (decodeJSON answers 408). Once the body has been
// read to its end the deadline is lifted, so a stream that follows it is not cut. A body the
// handler left unread (a 401, a 404 before the body mattered) is not waited for either: net/http
// would read it before sending the response, so its deadline is moved to now and the connection
// closes after the response, unless the rest of the body had already arrived.
func (s *Server) guardBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout)); err != nil {
			next.ServeHTTP(w, r) // no deadlines here (HTTP/2 or a test recorder)
			return
		}
		b := &timedBody{ReadCloser: r.Body, rc: rc}
		r.Body = b
		next.ServeHTTP(w, r)
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.eof && !info(r).detached {
			_ = rc.SetReadDeadline(time.Now())
		}
	})
}

// timedBody lifts the read deadline of guardBody when the body has been read to its end.
type timedBody struct {
	io.ReadCloser
	rc  *http.ResponseController
	mu  sync.Mutex
	eof bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.mu.Lock()
		if !b.eof {
			b.eof = true
			_ = b.rc.SetReadDeadline(time.Time{})
		}
		b.mu.Unlock()
	}
	return n, err
}

// isTimeout reports whether err is a read that ran into its deadline.
func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// openStreams counts the SSE streams open on this server per tenant and per session, for
// Config.MaxStreamsPerTenant and MaxStreamsPerSession.
type openStreams struct {
	mu        sync.Mutex
	byTenant  map[uuid.UUID]int
	bySession map[uuid.UUID]int
}

// reserveStream takes a place for a stream of a session; release gives it back (idempotent).
// Without a place it returns a too_many_streams error.
func (s *Server) reserveStream(tenant, session uuid.UUID) (release func(), err error) {
	o := &s.open
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byTenant == nil {
		o.byTenant, o.bySession = map[uuid.UUID]int{}, map[uuid.UUID]int{}
	}
	switch {
	case o.bySession[session] >= s.cfg.MaxStreamsPerSession:
		return nil, errorf(CodeTooManyStreams, fmt.Sprintf("the session has %d streams open, the most allowed; close one or retry later", s.cfg.MaxStreamsPerSession))
	case o.byTenant[tenant] >= s.cfg.MaxStreamsPerTenant:
		return nil, errorf(CodeTooManyStreams, fmt.Sprintf("the tenant has %d streams open, the most allowed; close one or retry later", s.cfg.MaxStreamsPerTenant))
	}
	o.bySession[session]++
	o.byTenant[tenant]++
	var once sync.Once
	return func() {
		once.Do(func() {
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.bySession[session]--; o.bySession[session] == 0 {
				delete(o.bySession, session)
			}
			if o.byTenant[tenant]--; o.byTenant[tenant] == 0 {
				delete(o.byTenant, tenant)
			}
		})
	}, nil
}
