package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/dshd/dshd/pkg/preset"
)

// fuzzBodies are the request body types the router decodes.
func fuzzBodies() []func() any {
	return []func() any{
		func() any { return new(preset.Body) },
		func() any { return new(sessionCreateRequest) },
		func() any { return new(messageRequest) },
		func() any { return new(tenantCreateRequest) },
		func() any { return new(cancelRequest) },
	}
}

// FuzzDecodeJSONBody: whatever the body and Content-Type, decodeJSON never panics and fails only
// with a problem of the client's (400, 408, 413 or 415), never an internal error; what it accepts
// is valid UTF-8 JSON that encodes again. Seeds: testdata/fuzz/FuzzDecodeJSONBody.
func FuzzDecodeJSONBody(f *testing.F) {
	f.Add(uint8(0), "application/json", []byte(`{"name":"p","model":{"provider":"scripted","model":"default"}}`))
	f.Fuzz(func(t *testing.T, kind uint8, contentType string, body []byte) {
		bodies := fuzzBodies()
		v := bodies[int(kind)%len(bodies)]()
		r := httptest.NewRequest("POST", "/", nil)
		r.Body = http.MaxBytesReader(httptest.NewRecorder(), readCloser(body), 1<<20)
		r.Header.Set("Content-Type", contentType)
		err := decodeJSON(r, v)
		if err != nil {
			code, detail := classify(err)
			if status := problemTable[code].status; status != 400 && status != 408 && status != 413 && status != 415 || detail == "" {
				t.Fatalf("body %q (%s): %v classified as %s %q", body, contentType, err, code, detail)
			}
			return
		}
		if _, err := json.Marshal(v); err != nil {
			t.Fatalf("accepted %q but cannot encode it again: %v", body, err)
		}
	})
}

// FuzzParseEventQuery: ?after=, ?limit=, ?types= and Last-Event-ID never panic the parser, and
// fail only as 400 invalid_request; what is accepted is in range. Seeds:
// testdata/fuzz/FuzzParseEventQuery.
func FuzzParseEventQuery(f *testing.F) {
	f.Add("5", "10", "turn/start,turn/end", "7", true)
	f.Fuzz(func(t *testing.T, after, limit, types, lastEventID string, stream bool) {
		q := url.Values{}
		for k, v := range map[string]string{"after": after, "limit": limit, "types": types} {
			if v != "" {
				q.Set(k, v)
			}
		}
		r := httptest.NewRequest("GET", "/?"+q.Encode(), nil)
		r.Header["Last-Event-ID"] = []string{lastEventID}
		if stream {
			r.Header.Set("Accept", "text/event-stream")
		}
		got, err := parseEventQuery(r)
		if err != nil {
			if code, _ := classify(err); code != CodeInvalidRequest {
				t.Fatalf("after %q limit %q types %q Last-Event-ID %q: %v (%s)", after, limit, types, lastEventID, err, code)
			}
			return
		}
		if got.after < -1 || got.limit < 1 || got.limit > 1000 {
			t.Fatalf("accepted an out-of-range query %+v", got)
		}
		for _, typ := range got.types {
			if typ == "" || len(typ) > 200 || !printable(typ) {
				t.Fatalf("accepted type %q", typ)
			}
		}
	})
}

type bytesBody struct{ b []byte }

func (r *bytesBody) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func (r *bytesBody) Close() error { return nil }

func readCloser(b []byte) *bytesBody { return &bytesBody{b: b} }
