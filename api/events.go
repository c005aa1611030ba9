package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/pgstore"
)

// eventPage is a page of the log: the events with seq > after, and the cursor to pass as after
// next time (the last seq returned, or after itself when the page is empty).
type eventPage struct {
	Events    []eventlog.Event `json:"events"`
	NextAfter int64            `json:"nextAfter"`
}

// eventQuery is what both the JSON pages and the streams read from the request.
type eventQuery struct {
	after int64
	limit int
	types []string
}

// handleEventList answers a page of the session's log as JSON, or, with
// Accept: text/event-stream, a live stream of it (stream.go).
func (rs sessionResource) handleEventList(w http.ResponseWriter, r *http.Request) {
	id, err := rs.sessionID(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	q, err := parseEventQuery(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if acceptsEventStream(r) {
		if release, ok := rs.s.reserveOrRefuse(w, r, id); ok {
			rs.s.stream(w, r, id, q, -1, nil, nil, release)
		}
		return
	}
	evs, err := rs.s.cfg.Log.EventList(r.Context(), tenantID(r), id,
		pgstore.ListQuery{After: q.after, Limit: q.limit, Types: q.types})
	if err != nil {
		writeError(w, r, err)
		return
	}
	evs = underBudget(evs, rs.s.cfg.PageBytes)
	next := q.after
	if len(evs) > 0 {
		next = evs[len(evs)-1].Seq
	}
	if evs == nil {
		evs = []eventlog.Event{}
	}
	writeJSON(w, http.StatusOK, eventPage{Events: evs, NextAfter: next})
}

// underBudget returns the longest prefix of evs whose data fits in budget bytes, and at least one
// event: nextAfter then points past the last one returned, so the client pages on.
func underBudget(evs []eventlog.Event, budget int) []eventlog.Event {
	n := 0
	for i, ev := range evs {
		n += len(ev.Data)
		if n > budget && i > 0 {
			return evs[:i]
		}
	}
	return evs
}

// parseEventQuery reads ?after= (default -1: from the start), ?limit= (1 to 1000, default 100)
// and ?types=a,b. For streams a Last-Event-ID header, when present, wins over ?after=.
func parseEventQuery(r *http.Request) (eventQuery, error) {
	after, err := intParam(r, "after", -1, -1, noMax)
	if err != nil {
		return eventQuery{}, err
	}
	if last := strings.TrimSpace(r.Header.Get("Last-Event-ID")); last != "" && acceptsEventStream(r) {
		after, err = strconv.ParseInt(last, 10, 64)
		if err != nil || after < -1 {
			return eventQuery{}, fieldError(headerPointer("Last-Event-ID"), "Last-Event-ID must be the integer seq of the last event received")
		}
	}
	limit, err := intParam(r, "limit", pgstore.DefaultEventPage, 1, pgstore.MaxEventPage)
	if err != nil {
		return eventQuery{}, err
	}
	var types []string
	if raw := r.URL.Query().Get("types"); raw != "" {
		for _, t := range strings.Split(raw, ",") {
			if t = strings.TrimSpace(t); t != "" {
				if !printable(t) || len(t) > 200 {
					return eventQuery{}, fieldError(queryPointer("types"), "types must be a comma-separated list of event types")
				}
				types = append(types, t)
			}
		}
	}
	return eventQuery{after: after, limit: int(limit), types: types}, nil
}

// acceptsEventStream reports whether the client asked for text/event-stream.
func acceptsEventStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}
