package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/fault"
	"github.com/dshd/dshd/pkg/pgstore"
)

// DefaultImportMaxBytes is the default bound of an import's body (Config.ImportMaxBytes).
const DefaultImportMaxBytes = 32 << 20

// importContentTypes are the media types an import's body may be sent as (none: as JSON Lines).
var importContentTypes = []string{ExportContentType, "application/jsonl", "application/x-jsonlines", "application/json"}

// importJSON is the answer of an import: the new session, with how many events the log brought
// and how many crash repair (SES-14) added to close its open last turn.
type importJSON struct {
	sessionJSON
	ImportedEvents int `json:"importedEvents"`
	RepairedEvents int `json:"repairedEvents"`
}

// importProblem is the problem document of a refused log: the problem, and where the first broken
// rule is (line 1 is the body's first line; 0 when the rule concerns the log as a whole).
type importProblem struct {
	Problem
	Line int    `json:"line"`
	Rule string `json:"rule"`
}

// importError is a log refused at a line of the body.
type importError struct {
	line   int
	rule   string
	detail string
}

func (e *importError) Error() string { return e.detail }

// handleSessionImport creates a session of ?preset= (its current version, as a create) from a
// DeepSeek Harness log sent as the body (docs/import-export.md): JSON Lines, the session header
// (SES-16) optionally first, then the events, seqs from 0. The log is checked whole before
// anything is created (eventlog.ImportLog: every SES rule, the SES-10 invariants, the inbox; an
// open last turn is closed by crash repair, a parked one refused), and is stored with a
// session/end-seed after it, in one transaction with the tenant's session and stored-bytes quotas
// checked in it. A bad log answers 400 invalid_request with the line and the rule; nothing is
// created. The header's fields are checked, not kept: the session gets its own id, time, owner and
// preset. 201 the session.
// An Idempotency-Key makes it safe to retry (idempotency.go).
func (rs sessionResource) handleSessionImport(w http.ResponseWriter, r *http.Request) {
	idempotentCreate(w, r, rs.s.cfg.Log.Creates(), tenantID(r).String(), idemRouteImport, nil, rs.importSession)
}

func (rs sessionResource) importSession(w http.ResponseWriter, r *http.Request) {
	if err := importContentType(r.Header.Get("Content-Type")); err != nil {
		writeError(w, r, err)
		return
	}
	raw := r.URL.Query().Get("preset")
	if raw == "" {
		writeError(w, r, errorf(CodeInvalidRequest, "?preset= is required: the id of the preset the imported session runs"))
		return
	}
	presetID, err := uuid.Parse(raw)
	if err != nil {
		writeError(w, r, errorf(CodeNotFound, "preset not found"))
		return
	}
	if !rs.s.checkQuota(w, r, pgstore.ForSession) {
		return
	}
	p, err := rs.s.cfg.Presets.PresetGet(r.Context(), tenantID(r), presetID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rs.s.cfg.ImportMaxBytes))
	if err != nil {
		writeError(w, r, bodyError(err))
		return
	}
	hdr, evs, lines, err := parseImport(body)
	if err != nil {
		writeImportError(w, r, err)
		return
	}
	bounds, err := rs.s.cfg.Quotas.ForkBounds(r.Context(), tenantID(r))
	if err != nil {
		writeError(w, r, err)
		return
	}
	sess, err := rs.s.cfg.Log.SessionImport(r.Context(), tenantID(r), pgstore.SessionParams{
		PresetID: &p.ID, PresetVersion: p.Version, AgentPreset: p.Name, Seed: evs}, bounds)
	if err != nil {
		writeImportError(w, r, importAt(err, hdr, lines))
		return
	}
	setSession(r, sess.ID)
	out := importJSON{sessionJSON: sessionOut(sess), ImportedEvents: len(evs)}
	if sess.Header.SeedLength != nil {
		out.RepairedEvents = int(*sess.Header.SeedLength) - len(evs)
	}
	logger(r).Info("session imported", "preset", p.ID, "events", len(evs), "repaired", out.RepairedEvents)
	w.Header().Set("Location", "/v1/sessions/"+sess.ID.String())
	writeJSON(w, http.StatusCreated, out)
}

// importContentType accepts JSON Lines (or JSON, or no Content-Type) as the import's body.
func importContentType(ct string) error {
	if strings.TrimSpace(ct) == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return errorf(CodeUnsupportedMedia, "the Content-Type header is malformed; send the log as "+ExportContentType)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return errorf(CodeUnsupportedMedia, "the log must be UTF-8 (charset=utf-8), not charset="+cs)
	}
	for _, t := range importContentTypes {
		if mt == t {
			return nil
		}
	}
	return errorf(CodeUnsupportedMedia, fmt.Sprintf("the log must be sent as %s (JSON Lines), not %s", ExportContentType, mt))
}

// parseImport splits the body into its optional header and its events, with the body line of
// each event. Blank lines (a trailing newline, CRLF ends) are skipped. The header is the first
// line when that line is an object without "type".
func parseImport(body []byte) (hdr *eventlog.SessionHeader, evs []eventlog.Event, lines []int, err error) {
	if i := invalidUTF8(body); i >= 0 {
		return nil, nil, nil, &importError{line: bytes.Count(body[:i], []byte("\n")) + 1, rule: "SES-1",
			detail: "the log is not valid UTF-8"}
	}
	n := 0
	for len(body) > 0 {
		n++
		var line []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			line, body = body, nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if hdr == nil && len(evs) == 0 && isHeaderLine(line) {
			h := eventlog.SessionHeader{Version: -1}
			if err := unmarshalStrict(line, &h); err != nil {
				return nil, nil, nil, &importError{line: n, rule: "SES-16", detail: "the session header: " + fault.Message(err)}
			}
			if err := h.Validate(); err != nil {
				rule := "SES-16"
				if h.Version != eventlog.FormatVersion {
					rule = "SES-9"
				}
				return nil, nil, nil, &importError{line: n, rule: rule, detail: "the session header: " + err.Error()}
			}
			hdr = &h
			continue
		}
		ev, err := parseEventLine(line)
		if err != nil {
			if isHeaderLine(line) {
				return nil, nil, nil, &importError{line: n, rule: "SES-16", detail: "a session header may only be the first line of the log"}
			}
			return nil, nil, nil, &importError{line: n, rule: "SES-1", detail: err.Error()}
		}
		evs = append(evs, ev)
		lines = append(lines, n)
	}
	return hdr, evs, lines, nil
}

// isHeaderLine reports whether a line is an object without a "type" member: a session header.
func isHeaderLine(line []byte) bool {
	if line[0] != '{' {
		return false
	}
	var probe struct {
		Type    *json.RawMessage `json:"type"`
		Version *json.RawMessage `json:"version"`
	}
	return json.Unmarshal(line, &probe) == nil && probe.Type == nil && probe.Version != nil
}

// eventMembers are the members of an event line (SES-1), in the order of parseEventLine's fields.
var eventMembers = []string{"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"}

// parseEventLine reads one event line: a JSON object with exactly SES-1's members, each once;
// type, seq and data are required. Only the members are decoded here: the data is checked when
// the log is loaded (lossless JSON, its kind's payload).
func parseEventLine(line []byte) (eventlog.Event, error) {
	var raw [7]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return eventlog.Event{}, errors.New("not an event: a line must be one JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return eventlog.Event{}, fmt.Errorf("not an event: malformed JSON: %v", err)
		}
		key, _ := tok.(string)
		i := slices.Index(eventMembers, key)
		switch {
		case i < 0:
			return eventlog.Event{}, fmt.Errorf("member %q is not one of an event's (%s)", key, strings.Join(eventMembers, ", "))
		case raw[i] != nil:
			return eventlog.Event{}, fmt.Errorf("member %q appears twice", key)
		}
		if err := dec.Decode(&raw[i]); err != nil {
			return eventlog.Event{}, fmt.Errorf("not an event: malformed JSON: %v", err)
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return eventlog.Event{}, errors.New("not an event: malformed JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return eventlog.Event{}, errors.New("not an event: a line must hold a single JSON object")
	}
	var ev eventlog.Event
	switch {
	case raw[0] == nil:
		return ev, errors.New("an event needs type")
	case raw[1] == nil:
		return ev, errors.New("an event needs seq")
	case raw[3] == nil:
		return ev, errors.New("an event needs data")
	case json.Unmarshal(raw[0], &ev.Type) != nil || loneSurrogate(raw[0]) >= 0:
		return ev, errors.New("type must be a string")
	case json.Unmarshal(raw[1], &ev.Seq) != nil:
		return ev, errors.New("seq must be an integer")
	case raw[2] != nil && (json.Unmarshal(raw[2], &ev.Time) != nil || ev.Time < 0):
		return ev, errors.New("time must be epoch milliseconds: a non-negative integer")
	}
	ev.Data = raw[3]
	if raw[4] != nil {
		ev.SurfaceOp = new(eventlog.SurfaceOp)
		if err := json.Unmarshal(raw[4], ev.SurfaceOp); err != nil {
			return ev, err
		}
	}
	if raw[5] != nil {
		ev.SourceEventSeqs = []int64{}
		if err := json.Unmarshal(raw[5], &ev.SourceEventSeqs); err != nil || ev.SourceEventSeqs == nil {
			return ev, errors.New("sourceEventSeqs must be an array of seqs")
		}
	}
	if raw[6] != nil && json.Unmarshal(raw[6], &ev.Ignorable) != nil {
		return ev, errors.New("ignorable must be true or false")
	}
	return ev, nil
}

// importAt places a refusal of the store's checks at the body line of the event it names.
func importAt(err error, hdr *eventlog.SessionHeader, lines []int) error {
	at := func(i int64) int {
		if i >= 0 && i < int64(len(lines)) {
			return lines[i]
		}
		return 0
	}
	var v *eventlog.ValidationError
	if errors.As(err, &v) {
		line := at(int64(v.Index))
		if v.Seq < 0 {
			line = 0
			if hdr != nil {
				line = 1
			}
		}
		return &importError{line: line, rule: v.Rule, detail: importDetail(line, v.Seq, v.Type, v.Reason)}
	}
	var inv *eventlog.InvariantError
	if errors.As(err, &inv) {
		line := at(inv.Seq)
		return &importError{line: line, rule: "SES-10", detail: importDetail(line, inv.Seq, inv.Type, inv.Reason)}
	}
	return err
}

func importDetail(line int, seq int64, typ, reason string) string {
	if seq < 0 {
		return reason
	}
	return fmt.Sprintf("event seq %d (%s): %s", seq, typ, reason)
}

// writeImportError answers a refused log with its line and rule, anything else as writeError.
func writeImportError(w http.ResponseWriter, r *http.Request, err error) {
	var ie *importError
	if !errors.As(err, &ie) {
		writeError(w, r, err)
		return
	}
	entry := problemTable[CodeInvalidRequest]
	detail := ie.rule + ": " + ie.detail
	if ie.line > 0 {
		detail = fmt.Sprintf("line %d: %s", ie.line, detail)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(entry.status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(importProblem{Problem: Problem{Type: "urn:dshd:problem:" + CodeInvalidRequest, Title: entry.title,
		Status: entry.status, Code: CodeInvalidRequest, Detail: detail + "; nothing was imported"}, Line: ie.line, Rule: ie.rule})
}

// importPath is the route of the import, whose body limit is ImportMaxBytes (limitBody).
const importPath = "/v1/sessions/import"
