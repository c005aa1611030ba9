package api

import (
	"net/http"

	"github.com/dshd/dshd/pkg/policy"
)

// webhookSecret is the answer of GET /v1/presets/{id}/webhook-secret.
type webhookSecret struct {
	Secret          string `json:"secret"`
	SignatureHeader string `json:"signatureHeader"`
}

// handlePresetWebhookSecret answers the signing secret of the preset's policy webhooks: 404 for
// an unknown preset, and while the server has no webhook key.
func (rs presetResource) handlePresetWebhookSecret(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "preset")
	if err != nil {
		writeError(w, r, err)
		return
	}
	secret, err := rs.presets.PresetWebhookSecret(r.Context(), tenantID(r), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, webhookSecret{Secret: secret, SignatureHeader: policy.HeaderSignature})
}
