package eventlog

// ImportLog checks a session log written elsewhere (a DeepSeek Harness log, or an export of
// another dshd session) before it becomes the seed of a new session, and returns the log to store:
//
//   - an event without a time (0: the reference's in-memory logs leave it out) gets now;
//   - every event passes the append rules, seqs contiguous from 0 (SES-1 to SES-9, SES-12: LoadLog);
//   - the relational invariants hold (SES-10: CheckInvariants);
//   - the splices after the log's last session/end-seed fit the inbox (LOOP-1);
//   - the last turn is not parked (E6: a parked turn waits for answers the importing server never
//     asked for);
//   - a last turn still open is closed by crash repair's closers (SES-14), appended to the log.
//
// The first broken rule is a *ValidationError (Seq and Index: the event's position in events) or,
// for SES-10, an *InvariantError (Seq). events is not modified.
func ImportLog(events []Event, now int64) ([]Event, error) {
	evs := make([]Event, len(events))
	copy(evs, events)
	for i := range evs {
		if evs[i].Time == 0 {
			evs[i].Time = now
		}
	}
	l, err := LoadLog(evs)
	if err != nil {
		return nil, err
	}
	evs = l.Events()
	if err := CheckInvariants(evs); err != nil {
		return nil, err
	}
	from := 0
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == TypeSessionEndSeed {
			from = i + 1
			break
		}
	}
	if _, err := (InboxLens{}).After(evs[from:]); err != nil {
		if v, ok := err.(*ValidationError); ok {
			v.Index = int(v.Seq)
		}
		return nil, err
	}
	if _, parked := Parked(evs); parked {
		last := evs[len(evs)-1]
		return nil, &ValidationError{Index: len(evs) - 1, Seq: last.Seq, Type: last.Type, Rule: "E6",
			Reason: "the log ends in a parked turn (turn/parked without turn/resumed): it waits for answers to " +
				"requests this server never made; import the log up to the turn's start, or once the turn is resumed"}
	}
	if closers := Closers(evs); len(closers) > 0 {
		if err := l.AppendEvents(closers...); err != nil {
			return nil, err
		}
		evs = l.Events()
	}
	return evs, nil
}
