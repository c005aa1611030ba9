package api

import "net/http"

// The stream operations (openapi.yaml: streamSessionEvents, postMessageStream) are the SSE forms of
// GET /v1/sessions/{id}/events and POST /v1/sessions/{id}/messages under paths of their own, so
// that a client generator can type their answers as streams of Event. The Accept:
// text/event-stream forms stay as aliases: both reach the same handler, which takes its stream
// branch whatever the request's Accept says.

// asEventStream serves h as if the request had asked for Accept: text/event-stream. The request
// handed on is a shallow copy with its own header, so the caller's request is left as it was.
func asEventStream(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r2 := r.WithContext(r.Context())
		r2.Header = r.Header.Clone()
		r2.Header.Set("Accept", "text/event-stream")
		h(w, r2)
	}
}
