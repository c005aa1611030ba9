package eventlog

import (
	"encoding/json"
	"reflect"
	"slices"
)

// surface is the ordered list of current surface nodes (seqs of surface events) and the count of
// replacements folded so far (SES-3 replaceGeneration).
type SurfaceState struct {
	nodes []int64
	gen   int
}

// LookupFunc returns the committed (or earlier in the batch) event at seq.
type LookupFunc func(seq int64) (Event, error)

// apply validates ev (whose seq is set and whose local rules passed) against the surface and
// folds it in. A failing apply leaves s unchanged. lookup is used only for a tool/result
// replacement (SES-4); it may be nil when ev is not one.
func (s *SurfaceState) apply(ev Event, lookup LookupFunc) error {
	if !IsSurfaceType(ev.Type) || ev.SurfaceOp == nil {
		return nil
	}
	if !ev.SurfaceOp.Replace {
		s.nodes = append(s.nodes, ev.Seq)
		return nil
	}
	op := ev.SurfaceOp
	i, j := slices.Index(s.nodes, op.Start), slices.Index(s.nodes, op.End)
	switch {
	case i < 0:
		return verr("SES-3", "replace start %d is not a current surface node", op.Start)
	case j < 0:
		return verr("SES-3", "replace end %d is not a current surface node", op.End)
	case i > j:
		return verr("SES-3", "replace start %d comes after end %d on the surface", op.Start, op.End)
	}
	hidden := s.nodes[i : j+1]
	for _, h := range hidden {
		if !slices.Contains(ev.SourceEventSeqs, h) {
			return verr("SES-3", "a replacement must cite every surface node it hides; missing %d", h)
		}
	}
	if ev.Type == TypeToolResult {
		if err := checkToolResultRewrite(ev, hidden, lookup); err != nil {
			return err
		}
	}
	s.nodes = slices.Concat(s.nodes[:i], []int64{ev.Seq}, s.nodes[j+1:])
	s.gen++
	return nil
}

// checkToolResultRewrite applies SES-4: a tool/result replacement replaces exactly one current
// tool/result node and changes only the inner content of its tool-result block.
func checkToolResultRewrite(ev Event, hidden []int64, lookup LookupFunc) error {
	if len(hidden) != 1 {
		return verr("SES-4", "a tool/result replacement must replace exactly one node, not %d", len(hidden))
	}
	orig, err := lookup(hidden[0])
	if err != nil {
		return err
	}
	if orig.Type != TypeToolResult {
		return verr("SES-4", "a tool/result replacement must replace a tool/result, not %s", orig.Type)
	}
	a, errA := withoutResultContent(orig.Data)
	b, errB := withoutResultContent(ev.Data)
	if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
		return verr("SES-4", "a tool/result replacement may change only the content of its tool-result block")
	}
	return nil
}

// withoutResultContent decodes tool/result data and blanks message.content[0].content.
func withoutResultContent(data []byte) (map[string]any, error) {
	var m map[string]any
	dec := json.NewDecoder(bytesReader(data))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	msg, _ := m["message"].(map[string]any)
	content, _ := msg["content"].([]any)
	if len(content) > 0 {
		if block, ok := content[0].(map[string]any); ok {
			block["content"] = nil
		}
	}
	return m, nil
}

func (s *SurfaceState) clone() SurfaceState {
	return SurfaceState{nodes: slices.Clone(s.nodes), gen: s.gen}
}

// Fold applies a trusted surface marker.
func (s *SurfaceState) Fold(seq int64, op SurfaceOp) {
	if !op.Replace {
		s.nodes = append(s.nodes, seq)
		return
	}
	for i, n := range s.nodes {
		if n != op.Start {
			continue
		}
		for j := i; j < len(s.nodes); j++ {
			if s.nodes[j] == op.End {
				s.nodes = append(append(s.nodes[:i:i], seq), s.nodes[j+1:]...)
				s.gen++
				return
			}
		}
	}
}

// Nodes returns the seqs of the current surface nodes in model order.
func (s *SurfaceState) Nodes() []int64 { return s.nodes }
