package api

import (
	"math"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
)

// Page sizes of list endpoints.
const (
	defaultPageLimit = 50
	maxPageLimit     = 500
	noMax            = math.MaxInt64
)

// page is the shape of every list: {items, nextCursor}; nextCursor is "" after the last page.
type page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor"`
}

// pageLimit parses ?limit= (default 50, 1 to 500).
func pageLimit(r *http.Request) (int, error) {
	n, err := intParam(r, "limit", defaultPageLimit, 1, maxPageLimit)
	return int(n), err
}

// intParam parses the query parameter name as an integer in [lo, hi], def when absent.
func intParam(r *http.Request, name string, def, lo, hi int64) (int64, error) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < lo || n > hi {
		want := " must be an integer from " + strconv.FormatInt(lo, 10) + " to " + strconv.FormatInt(hi, 10)
		if hi == noMax {
			want = " must be an integer >= " + strconv.FormatInt(lo, 10)
		}
		return 0, fieldError(queryPointer(name), name+want)
	}
	return n, nil
}

// pathID parses the {id} path parameter. An id that is not a UUID names nothing: 404.
func pathID(r *http.Request, what string) (uuid.UUID, error) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		return uuid.Nil, errorf(CodeNotFound, what+" not found")
	}
	return id, nil
}
