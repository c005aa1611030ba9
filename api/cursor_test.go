package api_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"testing"
)

// forgedCursors are list cursors no server produced: not base64, base64 of garbage, and the two
// cursor formats with out-of-range times, foreign separators and malformed ids.
func forgedCursors() []string {
	b := base64.RawURLEncoding.EncodeToString
	out := []string{
		"garbage!", "%%%", "a", "====", b([]byte("garbage")), b([]byte{0xff, 0xfe, 0}), b(nil) + "x",
		b([]byte("1:")), b([]byte(":" + "6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d")),
		b([]byte("-99999999999999999:6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d")),
		b([]byte("9223372036854775807:6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d")),
		b([]byte("-99999999999999999.6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d")),
		b([]byte("-9223372036854775808.6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d")),
		b([]byte("1700000000000000.{6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d}")),
		b([]byte("1700000000000000:urn:uuid:6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d")),
		b([]byte("1700000000000000.x")), b([]byte("1e5.6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d")),
		b([]byte("1700000000000000:6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d\x00")),
		b([]byte("+1700000000000000:6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d")),
		b([]byte("01700000000000000.6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d")),
		b([]byte("1700000000000000.6F1C1D0E-7B9A-4C47-9A57-1F0C2A3B4C5D")),
		b([]byte("1700000000000000:6f1c1d0e7b9a4c479a571f0c2a3b4c5d")),
		base64.URLEncoding.EncodeToString([]byte("1700000000000000.6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d")),
	}
	for _, us := range []string{"-1", "-9000000000000000000", "-4611686018427387904", "-210866803300000000", "-300000000000000000", "9224318016000000000"} {
		for _, sep := range []string{":", "."} {
			out = append(out, b([]byte(us+sep+"6f1c1d0e-7b9a-4c47-9a57-1f0c2a3b4c5d")))
		}
	}
	return out
}

// TestForgedListCursor: a list cursor the server did not produce answers 400
// invalid_request on both lists, never 500.
func TestForgedListCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.sessionCreate(t, e.keyA)
	for _, list := range []string{"/v1/sessions", "/v1/presets"} {
		for _, c := range forgedCursors() {
			r := e.do(t, "GET", list+"?cursor="+url.QueryEscape(c), e.keyA, nil)
			if r.status != http.StatusBadRequest {
				t.Errorf("%s?cursor=%q: %d %s", list, c, r.status, r.body)
				continue
			}
			r.wantProblem(t, http.StatusBadRequest, "invalid_request")
		}
	}
}
