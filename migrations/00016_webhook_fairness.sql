-- Tenant webhooks (docs/webhooks.md), fairness and retention:
--   webhook_deliveries.claim_token: the token of the claim that holds a delivery now (a fresh uuid
--     at each claim, cleared when its outcome is recorded); only the attempt of that claim may
--     record an outcome, so a stale attempt cannot record over a newer one, after a redelivery too.
--   webhook_deliveries_in_flight: the deliveries whose attempt is under way, by endpoint, which a
--     claim counts to keep at most a few attempts per endpoint in flight across replicas.
--   webhook_endpoints.failures / backoff_until: an endpoint's failed attempts in a row, and the
--     time before which none of its deliveries is attempted (set once failures reach the bound).
--   webhook_deliveries_settled: delivered and failed deliveries by the time they settled, which
--     the retention pass deletes from.

-- +goose Up
ALTER TABLE webhook_deliveries ADD COLUMN claim_token uuid;
ALTER TABLE webhook_endpoints ADD COLUMN failures integer NOT NULL DEFAULT 0,
    ADD COLUMN backoff_until timestamptz;
CREATE INDEX webhook_deliveries_in_flight ON webhook_deliveries (endpoint_id)
    WHERE claim_token IS NOT NULL AND delivered_at IS NULL AND failed_at IS NULL;
CREATE INDEX webhook_deliveries_settled ON webhook_deliveries ((coalesce(delivered_at, failed_at)))
    WHERE delivered_at IS NOT NULL OR failed_at IS NOT NULL;

-- +goose Down
DROP INDEX webhook_deliveries_settled;
DROP INDEX webhook_deliveries_in_flight;
ALTER TABLE webhook_endpoints DROP COLUMN failures, DROP COLUMN backoff_until;
ALTER TABLE webhook_deliveries DROP COLUMN claim_token;
