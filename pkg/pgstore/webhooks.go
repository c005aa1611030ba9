package pgstore

import (
	"context"

	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/fault"
)

// ErrWebhooksDisabled reports that this server has no policy webhook key (preset.Rules
// PolicyWebhookKey): no preset has a webhook signing secret.
var ErrWebhooksDisabled = &fault.Error{Code: fault.NotFound,
	Message: "policy webhooks are disabled on this server (DSHD_POLICY_WEBHOOK_KEY is not set)"}

// PresetWebhookSecret returns the signing secret of preset id's policy webhooks (policy.Secret:
// derived from the operator's key and the preset id, the same for every version), or
// preset.ErrNotFound, or ErrWebhooksDisabled.
func (s *Presets) PresetWebhookSecret(ctx context.Context, tenantID, id uuid.UUID) (string, error) {
	if _, err := s.PresetGet(ctx, tenantID, id); err != nil {
		return "", err
	}
	secret, ok := s.rules.WebhookSecret(id)
	if !ok {
		return "", ErrWebhooksDisabled
	}
	return secret, nil
}
