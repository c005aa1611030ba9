package eventlog

import (
	"bytes"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/llm"
)

// SessionHeader is the immutable session header (SES-16), kept outside the log. Owner is the tenant
// partition key: the store sets it to the tenant id unless the caller gives another value.
type SessionHeader struct {
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
func (h SessionHeader) Validate() error {
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
	Header        SessionHeader
	CreatedAt     time.Time
	LastSeq       int64
}

// Canonical returns h in the canonical form of SES-13: an empty system prompt and an empty tool
// list are dropped, and adapter-default markers that are false are dropped.
func (h ModelHeader) Canonical() ModelHeader {
	c := h
	if len(c.Tools) == 0 {
		c.Tools = nil
	}
	c.AdapterDefaults = nil
	for k, v := range h.AdapterDefaults {
		if v {
			if c.AdapterDefaults == nil {
				c.AdapterDefaults = map[string]bool{}
			}
			c.AdapterDefaults[k] = true
		}
	}
	return c
}

// Equal reports whether two headers are the same request header (SES-13): the config, the
// adapter-default markers, the system prompt and the tools in order, compared in canonical form.
func (h ModelHeader) Equal(o ModelHeader) bool {
	if h.same(o) {
		return true // the same values encode the same: most steps ask with an unchanged header
	}
	a, errA := marshalPayload(h.Canonical())
	b, errB := marshalPayload(o.Canonical())
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// same reports whether h and o hold the same values in canonical form (then they encode the same;
// headers that differ only in spelling, as two encodings of the same parameters, need Equal's
// comparison of their encodings).
func (h ModelHeader) same(o ModelHeader) bool {
	hc, oc := h.Config, o.Config
	if (hc.Temperature == nil) != (oc.Temperature == nil) || (hc.Temperature != nil && *hc.Temperature != *oc.Temperature) {
		return false
	}
	hc.Temperature, oc.Temperature = nil, nil
	if hc != oc || h.System != o.System || len(h.Tools) != len(o.Tools) || trueKeys(h.AdapterDefaults) != trueKeys(o.AdapterDefaults) {
		return false
	}
	for k, v := range h.AdapterDefaults {
		if v && !o.AdapterDefaults[k] {
			return false
		}
	}
	for i, t := range h.Tools {
		u := o.Tools[i]
		if t.Name != u.Name || t.Description != u.Description || !bytes.Equal(t.Parameters, u.Parameters) {
			return false
		}
	}
	return true
}

func trueKeys(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// header writes the JSON of a request header for appendPayload (encode.go).
func (e *payloadWriter) header(h ModelHeader) {
	c := h.Config
	if c.Temperature != nil {
		e.ok = false
		return
	}
	e.b = append(e.b, `{"config":{"provider":`...)
	e.b = llm.AppendJSONString(e.b, c.Provider, false)
	e.str("model", c.Model)
	if c.BaseURL != "" {
		e.str("baseUrl", c.BaseURL)
	}
	if c.MaxTokens != 0 {
		e.int("maxTokens", c.MaxTokens)
	}
	if c.ReasoningEffort != "" {
		e.str("reasoningEffort", c.ReasoningEffort)
	}
	e.b = append(e.b, '}')
	if len(h.AdapterDefaults) > 0 {
		keys := slices.Sorted(maps.Keys(h.AdapterDefaults))
		e.key("adapterDefaults")
		for i, k := range keys {
			if i == 0 {
				e.b = append(e.b, '{')
			} else {
				e.b = append(e.b, ',')
			}
			e.b = llm.AppendJSONString(e.b, k, false)
			e.b = append(e.b, ':')
			e.b = strconv.AppendBool(e.b, h.AdapterDefaults[k])
		}
		e.b = append(e.b, '}')
	}
	if h.System != "" {
		e.str("system", h.System)
	}
	if len(h.Tools) > 0 {
		e.key("tools")
		for i, t := range h.Tools {
			if i == 0 {
				e.b = append(e.b, '[')
			} else {
				e.b = append(e.b, ',')
			}
			e.b = append(e.b, `{"name":`...)
			e.b = llm.AppendJSONString(e.b, t.Name, false)
			e.str("description", t.Description)
			e.key("parameters")
			e.raw(t.Parameters)
			e.b = append(e.b, '}')
		}
		e.b = append(e.b, ']')
	}
	e.b = append(e.b, '}')
}

// raw writes JSON of a json.RawMessage field as encoding/json does (compacted; nil as null), when
// it is lossless; anything else is left to encoding/json and the lossless check.
func (e *payloadWriter) raw(m []byte) {
	if m == nil {
		e.b = append(e.b, "null"...)
		return
	}
	c, err := losslessOwned(m)
	if err != nil {
		e.ok = false
		return
	}
	e.b = append(e.b, c...)
}
