package scheduler

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/dshd/dshd/pkg/registry"
)

// ParseArguments turns the raw argument string of a tool call into the JSON value the pipeline
// receives (SCHED-1):
//   - the empty string becomes `{}`;
//   - valid JSON is kept as that value (compacted; no number or key is altered);
//   - anything else becomes the JSON string whose value is the raw text, so a Define tool then
//     fails with INVALID_ARGS instead of the call being dropped.
//
// Invalid UTF-8 is replaced by U+FFFD first, so the result is always valid, UTF-8 JSON. The
// returned slice is freshly allocated and owned by the caller.
func ParseArguments(raw string) json.RawMessage {
	if raw == "" {
		return json.RawMessage(`{}`)
	}
	if !utf8.ValidString(raw) {
		raw = strings.ToValidUTF8(raw, "\uFFFD")
	}
	var buf bytes.Buffer
	if json.Valid([]byte(raw)) {
		if err := json.Compact(&buf, []byte(raw)); err == nil {
			return buf.Bytes()
		}
	}
	buf.Reset()
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(raw) // a valid UTF-8 string always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// Step says where a batch of calls was made and on whose behalf.
type Step struct {
	// Turn and Step locate the calls in the session; they become each input's Location.
	Turn, Step int
	// Agent is the initiating agent (session) id; empty for calls with no agent.
	Agent string
	// Scope is the registry scope the calls resolve in (SCP rules).
	Scope string
	// Log is the session log the calls' bodies may write to while they run (registry.Recorder);
	// nil for calls outside a session.
	Log registry.Recorder
	// Park lets the step park (extension E6): a call whose ask parks (registry.PrepPark) or a
	// client-executed call (registry.Prepared.AwaitsClient) waits outside the server, and
	// RunStep returns with Outcome.Parked once every result before it is committed.
	Park bool
}

// input builds the pipeline input of one top-level call (SCHED-1). RootCallID is the call itself;
// a top-level call has no parent.
func (st Step) input(c Call) registry.Input {
	in := registry.Input{
		CallID:     c.ID,
		Name:       c.Name,
		Args:       ParseArguments(c.Arguments),
		Scope:      st.Scope,
		Agent:      st.Agent,
		Location:   registry.Location{Turn: st.Turn, Step: st.Step},
		RootCallID: c.ID,
		Log:        st.Log,
		Park:       st.Park,
	}
	if c.Resume != nil {
		in.Resumed = c.Resume.Input
	}
	return in
}
