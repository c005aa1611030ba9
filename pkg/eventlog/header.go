package eventlog

import (
	"bytes"
	"fmt"
	"path"
	"time"

	"github.com/google/uuid"
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
