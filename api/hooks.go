package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/dshd/dshd/pkg/netguard"
	"github.com/dshd/dshd/pkg/pgstore"
	"github.com/dshd/dshd/pkg/webhook"
)

// Bounds of a webhook endpoint's fields.
const (
	maxWebhookURLBytes         = 2048
	maxWebhookDescriptionBytes = 1024
)

// DefaultWebhookMaxEndpoints is Config.WebhookMaxEndpoints's default.
const DefaultWebhookMaxEndpoints = 20

// hookResource serves /v1/webhooks: the tenant's webhook endpoints and their delivery logs
// (docs/webhooks.md).
type hookResource struct {
	hooks        *pgstore.Webhooks
	allowHTTP    bool
	allowPrivate bool
	max          int
}

func (rs hookResource) routes() chi.Router {
	r := chi.NewRouter()
	r.Post("/", rs.handleWebhookCreate)
	r.Get("/", rs.handleWebhookList)
	r.Get("/{id}", rs.handleWebhookGet)
	r.Patch("/{id}", rs.handleWebhookUpdate)
	r.Delete("/{id}", rs.handleWebhookDelete)
	r.Post("/{id}/rotate-secret", rs.handleWebhookRotate)
	r.Get("/{id}/deliveries", rs.handleWebhookDeliveries)
	r.Post("/{id}/deliveries/{deliveryId}/retry", rs.handleWebhookRetry)
	return r
}

// webhookCreated is an endpoint with its signing secret: the answer of a creation and of a
// rotation, the only ones that show the secret.
type webhookCreated struct {
	pgstore.WebhookEndpoint
	Secret string `json:"secret"`
}

type webhookCreateRequest struct {
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Description string   `json:"description"`
}

type webhookUpdateRequest struct {
	URL         *string  `json:"url"`
	Events      []string `json:"events"`
	Description *string  `json:"description"`
	Disabled    *bool    `json:"disabled"`
}

// checkURL checks an endpoint URL: bounded, https (http only when the operator allows it), on a
// public host unless the operator allows private ones (netguard.CheckURL; the sender checks
// every address it dials again).
func (rs hookResource) checkURL(u string) error {
	switch {
	case u == "":
		return fieldError("/url", "url is required")
	case len(u) > maxWebhookURLBytes:
		return fieldError("/url", fmt.Sprintf("url must be at most %d bytes", maxWebhookURLBytes))
	}
	if err := netguard.CheckURL(u, rs.allowHTTP, rs.allowPrivate); err != nil {
		return fieldErrorCode(CodeWebhookURLNotAllowed, "/url", "url "+err.Error())
	}
	return nil
}

// checkEvents checks a subscription: a non-empty set of known event types, returned sorted
// without duplicates.
func checkEvents(events []string) ([]string, error) {
	if len(events) == 0 {
		return nil, fieldError("/events", "events must name at least one of "+strings.Join(pgstore.WebhookEventTypes, ", "))
	}
	out := make([]string, 0, len(events))
	for i, e := range events {
		if !slices.Contains(pgstore.WebhookEventTypes, e) {
			return nil, fieldError(fmt.Sprintf("/events/%d", i), fmt.Sprintf("events: unknown event type %q (want %s)",
				netguard.Clip(e, 64), strings.Join(pgstore.WebhookEventTypes, ", ")))
		}
		out = append(out, e)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func checkDescription(d string) error {
	if len(d) > maxWebhookDescriptionBytes {
		return fieldError("/description", fmt.Sprintf("description must be at most %d bytes", maxWebhookDescriptionBytes))
	}
	return nil
}

// handleWebhookCreate registers an endpoint: 201 with its signing secret, shown this once. An
// Idempotency-Key makes it safe to retry; a replay answers the endpoint without its secret
// (idempotency.go).
func (rs hookResource) handleWebhookCreate(w http.ResponseWriter, r *http.Request) {
	idempotentCreate(w, r, rs.hooks.Creates(), tenantID(r).String(), idemRouteWebhook, []string{"secret"}, rs.createWebhook)
}

func (rs hookResource) createWebhook(w http.ResponseWriter, r *http.Request) {
	var body webhookCreateRequest
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, err)
		return
	}
	// Every field is checked: the problem names each one at fault.
	events, err := checkEvents(body.Events)
	err = joinFields(err, rs.checkURL(body.URL), checkDescription(body.Description))
	if err != nil {
		writeError(w, r, err)
		return
	}
	secret := webhook.NewSecret()
	e, err := rs.hooks.WebhookCreate(r.Context(), tenantID(r), body.URL, events, body.Description, secret, rs.max)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, webhookCreated{WebhookEndpoint: e, Secret: webhook.FormatSecret(secret)})
}

// handleWebhookList answers {items, nextCursor} in creation order.
func (rs hookResource) handleWebhookList(w http.ResponseWriter, r *http.Request) {
	limit, err := pageLimit(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items, next, err := rs.hooks.WebhookList(r.Context(), tenantID(r), r.URL.Query().Get("cursor"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page[pgstore.WebhookEndpoint]{Items: items, NextCursor: next})
}

func (rs hookResource) handleWebhookGet(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "webhook endpoint")
	if err != nil {
		writeError(w, r, err)
		return
	}
	e, err := rs.hooks.WebhookGet(r.Context(), tenantID(r), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// handleWebhookUpdate changes the fields the body sets; disabled: true stops deliveries (and
// gives up the pending ones), false starts them again for new events.
func (rs hookResource) handleWebhookUpdate(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "webhook endpoint")
	if err != nil {
		writeError(w, r, err)
		return
	}
	var body webhookUpdateRequest
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, err)
		return
	}
	p := pgstore.WebhookPatch{URL: body.URL, Description: body.Description, Disabled: body.Disabled}
	if body.Events != nil {
		if p.Events, err = checkEvents(body.Events); err != nil {
			writeError(w, r, err)
			return
		}
	}
	if body.URL != nil {
		if err := rs.checkURL(*body.URL); err != nil {
			writeError(w, r, err)
			return
		}
	}
	if body.Description != nil {
		if err := checkDescription(*body.Description); err != nil {
			writeError(w, r, err)
			return
		}
	}
	e, err := rs.hooks.WebhookUpdate(r.Context(), tenantID(r), id, p)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

func (rs hookResource) handleWebhookDelete(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "webhook endpoint")
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := rs.hooks.WebhookDelete(r.Context(), tenantID(r), id); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleWebhookRotate gives the endpoint a new signing secret, shown this once; attempts from
// now on are signed with it.
func (rs hookResource) handleWebhookRotate(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "webhook endpoint")
	if err != nil {
		writeError(w, r, err)
		return
	}
	secret := webhook.NewSecret()
	e, err := rs.hooks.WebhookSetSecret(r.Context(), tenantID(r), id, secret)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, webhookCreated{WebhookEndpoint: e, Secret: webhook.FormatSecret(secret)})
}

// handleWebhookDeliveries answers the endpoint's delivery log, newest first.
func (rs hookResource) handleWebhookDeliveries(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "webhook endpoint")
	if err != nil {
		writeError(w, r, err)
		return
	}
	limit, err := pageLimit(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	items, next, err := rs.hooks.WebhookDeliveries(r.Context(), tenantID(r), id, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, page[pgstore.WebhookDelivery]{Items: items, NextCursor: next})
}

// handleWebhookRetry schedules a delivered or failed delivery again at once, with a fresh retry
// schedule: 202 with the delivery.
func (rs hookResource) handleWebhookRetry(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "webhook endpoint")
	if err != nil {
		writeError(w, r, err)
		return
	}
	did, err := uuid.Parse(chi.URLParam(r, "deliveryId"))
	if err != nil {
		writeError(w, r, pgstore.ErrDeliveryNotFound)
		return
	}
	d, err := rs.hooks.WebhookRedeliver(r.Context(), tenantID(r), id, did)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, d)
}
