package promptasm

import "github.com/dshd/dshd/pkg/llm"

// SnapshotPlugin is the source plugin of runtime-context snapshot messages.
const SnapshotPlugin = "@monotykamary/dsh-system-prompt"

// SnapshotForm is the source form of runtime-context snapshot messages.
const SnapshotForm = "snapshot"

// SnapshotHeader is the first line of every non-empty runtime-context snapshot.
const SnapshotHeader = "Current runtime context. This snapshot replaces every earlier runtime-context snapshot."

// SnapshotNone is the text sent once the runtime context becomes empty after having content.
const SnapshotNone = "Current runtime context: none. Earlier runtime-context snapshots no longer apply."

// Snapshot is the rendered runtime context of one assembly (PRM-9).
type Snapshot struct {
	// Text is SnapshotHeader and the sections' texts, separated by blank lines; empty when no
	// section rendered non-empty.
	Text string
	// Sections are the non-empty rendered runtime-context entries, in order.
	Sections []SectionText
}

func newSnapshot(sections []SectionText) Snapshot {
	if len(sections) == 0 {
		return Snapshot{}
	}
	return Snapshot{Text: SnapshotHeader + "\n\n" + joinTexts(sections), Sections: sections}
}

// Names returns the section names, in order.
func (s Snapshot) Names() []string {
	if len(s.Sections) == 0 {
		return nil
	}
	names := make([]string, len(s.Sections))
	for i, sec := range s.Sections {
		names[i] = sec.Name
	}
	return names
}

// Snapshotter tracks the snapshot the model currently has and says when a new snapshot message
// must be appended (PRM-9). Use one per agent; it is not safe for concurrent use. The zero value
// keeps no snapshot.
type Snapshotter struct {
	kept string // text of the last snapshot message appended, "" when none is kept
}

// Next returns the user message to append for snap, with the given message id, and true when it
// differs from the kept snapshot: snap's text when it is non-empty, or SnapshotNone when the
// context became empty after having content. The returned message becomes the kept one.
func (s *Snapshotter) Next(id string, snap Snapshot) (llm.Message, bool) {
	want, sections := snap.Text, snap.Names()
	if want == "" && s.kept != "" {
		want, sections = SnapshotNone, nil
	}
	if want == "" || want == s.kept {
		return llm.Message{}, false
	}
	s.kept = want
	return llm.Message{
		ID:      id,
		Role:    llm.RoleUser,
		Content: []llm.Block{llm.TextBlock(want)},
		Source: llm.Source{Kind: llm.SourcePlugin, Plugin: SnapshotPlugin, Form: SnapshotForm,
			Sections: sections},
	}, true
}

// Reset forgets the kept snapshot, for example when a surface replacement hid it: the next
// non-empty snapshot is emitted again, and an empty one emits nothing.
func (s *Snapshotter) Reset() { s.kept = "" }

// Keep records text as the snapshot the model already has, without emitting it; used when an
// agent resumes from a log whose visible history ends with a snapshot message.
func (s *Snapshotter) Keep(text string) { s.kept = text }

// Kept returns the text of the kept snapshot, or "" when none is kept.
func (s *Snapshotter) Kept() string { return s.kept }
