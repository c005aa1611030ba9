package pgstore

import "github.com/google/uuid"

// WithRewrapRead returns a copy of w that runs f where WebhookRewrap has read an endpoint's row
// and not yet replaced it, so that a test can change the row in between.
func (w *Webhooks) WithRewrapRead(f func(endpoint uuid.UUID)) *Webhooks {
	c := *w
	c.rewrapRead = f
	return &c
}
