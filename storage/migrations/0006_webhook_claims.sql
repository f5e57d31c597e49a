-- A webhook request taken by a sender is claimed until claimed_until_ms (NULL:
-- not claimed). The claim is kept apart from next_attempt_at_ms so that a node
-- starting alone on the database can take back its previous run's claims at
-- once, without touching the retry times of failed requests.
ALTER TABLE webhook_outbox ADD COLUMN claimed_until_ms INTEGER;
