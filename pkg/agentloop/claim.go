package agentloop

import (
	"context"
	"slices"

	"github.com/dshd/dshd/pkg/eventlog"
	"github.com/dshd/dshd/pkg/llm"
)

func lenOf(l *Head, target string) *int {
	if target == TargetNextTurn {
		return &l.NextTurnLen
	}
	return &l.NextStepLen
}

// stageInsertion stages the insertion of msgs at the end of target. The position is taken from
// the inbox lengths under the append lock, so it is right whatever other writers did meanwhile.
func (w *writer) stageInsertion(target string, msgs []llm.Message) *handle {
	return w.stage(staged{typ: eventlog.TypeInboxSpliced, dataFn: func(l *Head) (any, error) {
		n := lenOf(l, target)
		s := Insertion(target, *n, msgs...)
		*n += len(msgs)
		return s, nil
	}})
}

// claim removes up to max messages (0: all) from the front of target, as one logged deletion
// splice, flushes, and returns the claimed messages. It returns nil without writing anything when
// the mirror holds no message for target. The claim is built on an up-to-date view of the log,
// so a message cleared by a concurrent cancel is never claimed.
func (w *writer) claim(ctx context.Context, target string, max int) ([]llm.Message, error) {
	if len(w.m.list(target)) == 0 {
		return nil, nil
	}
	var claimed []llm.Message
	w.stage(staged{typ: eventlog.TypeInboxSpliced, fresh: true, dataFn: func(l *Head) (any, error) {
		list := w.m.list(target)
		k := len(list)
		if max > 0 && k > max {
			k = max
		}
		claimed = slices.Clone(list[:k])
		*lenOf(l, target) -= k
		return Deletion(target, k, ""), nil
	}})
	if err := w.flush(ctx); err != nil {
		return nil, err
	}
	return claimed, nil
}
