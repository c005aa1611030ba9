package worker

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/approval"
	"github.com/dshd/dshd/pkg/pgstore"
)

// ApprovalPolicySet changes the session's approval policy (APR-6, approval.PolicyChange) as an
// inject is posted: the session's and the tenant's post rates and the session's inbox bound
// apply to it (fault.RateLimited, fault.InboxFull), it does not wake the session, and the
// notice it injects replaces the unread notice of an earlier change instead of joining it, so
// a session holds at most one unread policy notice. It returns the seq of the `approval/policy`
// in force after it (an earlier one when the policy was already in force: nothing is
// appended). A policy other than ask or never is refused (fault.Invalid); an unknown, other
// tenant's or deleted session is ErrNotFound.
func (s *Service) ApprovalPolicySet(ctx context.Context, tenantID, sessionID uuid.UUID, policy string) (int64, error) {
	c, err := approval.NewPolicyChange(policy)
	if err != nil {
		return 0, err
	}
	if err := s.posts.allow(tenantID, sessionID, time.Now()); err != nil {
		return 0, err
	}
	_, err = s.cfg.Store.Post(ctx, pgstore.PostParams{Tenant: tenantID, Session: sessionID,
		Bound:   pgstore.InboxBound{Messages: max(s.cfg.InboxMaxMessages, 0), Bytes: max(s.cfg.InboxMaxBytes, 0)},
		Prepare: func(ctx context.Context, r pgstore.EventReader) error { return c.Read(ctx, r) },
		Build:   c.Build})
	if err != nil {
		return 0, err
	}
	return c.Seq(), nil
}
