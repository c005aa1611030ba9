package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/preset"
)

// presetResource serves /v1/presets: agent presets of the authenticated tenant.
type presetResource struct {
	presets *pgstore.Presets
}

func (rs presetResource) routes() chi.Router {
	r := chi.NewRouter()
	r.Post("/", rs.handlePresetCreate)
	r.Get("/", rs.handlePresetList)
	r.Get("/{id}", rs.handlePresetGet)
	r.Put("/{id}", rs.handlePresetUpdate)
	r.Delete("/{id}", rs.handlePresetDelete)
	r.Get("/{id}/webhook-secret", rs.handlePresetWebhookSecret)
	return r
}

// handlePresetCreate validates the body, fills its defaults and stores version 1: 201 preset.
// An Idempotency-Key makes it safe to retry (idempotency.go).
func (rs presetResource) handlePresetCreate(w http.ResponseWriter, r *http.Request) {
	idempotentCreate(w, r, rs.presets.Creates(), tenantID(r).String(), idemRoutePreset, nil, rs.createPreset)
}

func (rs presetResource) createPreset(w http.ResponseWriter, r *http.Request) {
	var body preset.Body
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, err)
		return
	}
	p, err := rs.presets.PresetCreate(r.Context(), tenantID(r), body)
	if err != nil {
		writeError(w, r, pointTo(err, "model.credential"))
		return
	}
	writeJSON(w, http.StatusCreated, p)
}

// handlePresetList answers {items, nextCursor} in creation order.
func (rs presetResource) handlePresetList(w http.ResponseWriter, r *http.Request) {
	limit, err := pageLimit(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items, next, err := rs.presets.PresetList(r.Context(), tenantID(r), r.URL.Query().Get("cursor"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page[preset.Preset]{Items: items, NextCursor: next})
}

// handlePresetGet answers the current version of the preset.
func (rs presetResource) handlePresetGet(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "preset")
	if err != nil {
		writeError(w, r, err)
		return
	}
	p, err := rs.presets.PresetGet(r.Context(), tenantID(r), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// handlePresetUpdate replaces the preset's body, writing a new version: 200 with the new version.
func (rs presetResource) handlePresetUpdate(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "preset")
	if err != nil {
		writeError(w, r, err)
		return
	}
	var body preset.Body
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, err)
		return
	}
	p, err := rs.presets.PresetUpdate(r.Context(), tenantID(r), id, body)
	if err != nil {
		writeError(w, r, pointTo(err, "model.credential"))
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// handlePresetDelete deletes the preset: 204. Sessions that pinned one of its versions keep it.
func (rs presetResource) handlePresetDelete(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "preset")
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := rs.presets.PresetDelete(r.Context(), tenantID(r), id); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
