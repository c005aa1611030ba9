package pgstore

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/dshd/dshd/pkg/eventlog"
)

// SessionImport creates a session of tenantID whose log starts with p.Seed, a log written
// elsewhere (docs/import-export.md), in one transaction: nothing is created unless all of it is.
// The seed is checked and completed by eventlog.ImportLog (events without a time get the
// session's creation time; every SES rule and the SES-10 invariants hold; an open last turn is
// closed by the SES-14 closers; a parked one is refused), and is followed by session/end-seed
// unless it ends with one; the header's seedLength is the number of events before that marker.
// p.Seed nil is an empty log. The tenant's bounds are checked after the insert, in the
// transaction, as a fork's are (ForkWithin): the import takes the tenant's fork lock, and one
// that would take the tenant past b is refused with a quota_exceeded fault.
//
// Errors: the *eventlog.ValidationError or *eventlog.InvariantError of the first broken rule,
// ErrConflict when p.ID is taken, ErrNotFound when the tenant does not exist, quota_exceeded.
func (s *Store) SessionImport(ctx context.Context, tenantID uuid.UUID, p SessionParams, b ForkBounds) (eventlog.Session, error) {
	if p.ID == uuid.Nil {
		p.ID = uuid.New()
	}
	created := s.now().Truncate(time.Millisecond)
	seed, err := eventlog.ImportLog(p.Seed, created.UnixMilli())
	if err != nil {
		return eventlog.Session{}, err
	}
	n := int64(len(seed))
	h := eventlog.SessionHeader{Version: eventlog.FormatVersion, ID: p.ID.String(), CreatedAt: created.UnixMilli(), Cwd: p.Cwd,
		ParentSession: p.ParentSession, Origin: p.Origin, DelegationDepth: p.DelegationDepth,
		AgentPreset: p.AgentPreset, Owner: p.Owner, SeedLength: &n}
	if h.Owner == "" {
		h.Owner = tenantID.String()
	}
	if err := h.Validate(); err != nil {
		return eventlog.Session{}, &eventlog.ValidationError{Seq: -1, Rule: "SES-16", Reason: err.Error()}
	}
	if len(seed) == 0 || seed[len(seed)-1].Type != eventlog.TypeSessionEndSeed {
		seed = append(seed, endSeed(n, created.UnixMilli()))
	}
	sess := eventlog.Session{ID: p.ID, TenantID: tenantID, PresetID: p.PresetID, PresetVersion: p.PresetVersion,
		Header: h, CreatedAt: created, LastSeq: int64(len(seed)) - 1}
	bounded := b.MaxSessions != nil || b.MaxLogBytes != nil
	err = s.inTx(ctx, "import session", func(tx pgx.Tx) error {
		if bounded {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('dshd forks ' || $1::text, 0))`, tenantID); err != nil {
				return err
			}
		}
		if err := insertSession(ctx, tx, sess); err != nil {
			return err
		}
		if err := insertEvents(ctx, tx, tenantID, sess.ID, seed); err != nil {
			return err
		}
		if err := syncInbox(ctx, tx, sess.ID); err != nil {
			return err
		}
		if !bounded {
			return nil
		}
		return within(ctx, tx, tenantID, b, "import")
	})
	if err != nil {
		return eventlog.Session{}, err
	}
	return sess, nil
}
