package eventlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"time"

	"github.com/google/uuid"
)

// Header is the immutable session header (SES-16), kept outside the log. Owner is the tenant
// partition key: the store sets it to the tenant id unless the caller gives another value.
type Header struct {
	Version         int    `json:"version"`
	ID              string `json:"id"`
	CreatedAt       int64  `json:"createdAt"` // epoch ms
	Cwd             string `json:"cwd,omitempty"`
	ParentSession   string `json:"parentSession,omitempty"`
	SeedLength      *int64 `json:"seedLength,omitempty"`
	Origin          string `json:"origin,omitempty"` // "subagent" or empty
	DelegationDepth int    `json:"delegationDepth,omitempty"`
	AgentPreset     string `json:"agentPreset,omitempty"`
	Owner           string `json:"owner,omitempty"`
}

// Validate checks the SES-16 rules: format version 0, an id, a non-negative createdAt, an
// absolute cwd, origin "subagent" when set, non-negative seedLength and delegationDepth.
func (h Header) Validate() error {
	switch {
	case h.Version != FormatVersion:
		return fmt.Errorf("session format version %d is not supported (want %d)", h.Version, FormatVersion)
	case h.ID == "":
		return fmt.Errorf("session header id is required")
	case h.CreatedAt < 0:
		return fmt.Errorf("session header createdAt must be non-negative")
	case h.Cwd != "" && !path.IsAbs(h.Cwd):
		return fmt.Errorf("session header cwd must be an absolute path, got %q", h.Cwd)
	case h.Origin != "" && h.Origin != "subagent":
		return fmt.Errorf("session header origin must be \"subagent\" when set")
	case h.SeedLength != nil && *h.SeedLength < 0:
		return fmt.Errorf("session header seedLength must be non-negative")
	case h.DelegationDepth < 0:
		return fmt.Errorf("session header delegationDepth must be non-negative")
	}
	return nil
}

// Session is a stored session: its ids, the preset version it pinned, its header, and the seq of
// its last event (-1 for an empty log) at the time it was read.
type Session struct {
	ID            uuid.UUID
	TenantID      uuid.UUID
	PresetID      *uuid.UUID
	PresetVersion int
	Header        Header
	CreatedAt     time.Time
	LastSeq       int64
}

// RequestHeader is the data.header of a request/header event (SES-13).
type RequestHeader struct {
	Config          json.RawMessage   `json:"config"`
	AdapterDefaults map[string]bool   `json:"adapterDefaults,omitempty"`
	System          string            `json:"system,omitempty"`
	Tools           []json.RawMessage `json:"tools,omitempty"`
}

// Canonical returns h made canonical (SES-13): an empty system prompt and an empty tool list are
// dropped, and every JSON part is compacted.
func (h RequestHeader) Canonical() RequestHeader {
	c := RequestHeader{Config: compact(h.Config), System: h.System}
	if len(h.AdapterDefaults) > 0 {
		c.AdapterDefaults = h.AdapterDefaults
	}
	for _, t := range h.Tools {
		c.Tools = append(c.Tools, compact(t))
	}
	return c
}

// Equal compares two headers after making them canonical: the config, the adapter-default
// markers, the system prompt and the tools in order (SES-13). Config objects compare as JSON
// values, so key order does not matter.
func (h RequestHeader) Equal(o RequestHeader) bool {
	a, b := h.Canonical(), o.Canonical()
	if !jsonEqual(a.Config, b.Config) || a.System != b.System || len(a.Tools) != len(b.Tools) ||
		len(a.AdapterDefaults) != len(b.AdapterDefaults) {
		return false
	}
	for k, v := range a.AdapterDefaults {
		if w, ok := b.AdapterDefaults[k]; !ok || w != v {
			return false
		}
	}
	for i := range a.Tools {
		if !bytes.Equal(a.Tools[i], b.Tools[i]) {
			return false
		}
	}
	return true
}

// HeaderInForce returns the canonical header of the last request/header event of events, the
// header in force (SES-13), and false when there is none.
func HeaderInForce(events []Event) (RequestHeader, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Type != TypeRequestHeader {
			continue
		}
		var d struct {
			Header RequestHeader `json:"header"`
		}
		if json.Unmarshal(events[i].Data, &d) == nil {
			return d.Header.Canonical(), true
		}
	}
	return RequestHeader{}, false
}

func compact(b json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
