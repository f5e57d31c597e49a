package push

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/gen/publish"
	"github.com/heraldrt/herald/server/internal/text"
	"github.com/heraldrt/herald/storage"
)

// WebhookSignatureHeader carries the signature of a publish webhook:
// "sha256=" and the hex HMAC-SHA256 of the exact body, keyed with the
// instance's secret key.
const WebhookSignatureHeader = "Webhook-Signature"

// SignWebhook returns the Webhook-Signature value for body.
func SignWebhook(secretKey string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secretKey))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// webhookTimeout bounds one publish webhook request.
const webhookTimeout = 10 * time.Second

// webhookLease is how long a claimed publish webhook waits for its sender
// (eight requests of at most 10 s each) before another may send it: after
// a crash, that long.
const webhookLease = 2 * time.Minute

// sendWebhooks delivers the publish webhook outbox: a 2xx answer removes a
// request, anything else retries it with backoff until WebhookMaxAge.
func (d *Dispatcher) sendWebhooks(ctx context.Context) {
	for ctx.Err() == nil {
		sent, err := d.sendDueWebhooks(ctx)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Error("reading the publish webhook outbox", zap.Error(err))
			}
			sleep(ctx, d.wakeHooks, time.Second)
			continue
		}
		if sent > 0 {
			continue
		}
		wait := cmp.Or(d.opts.idlePoll, 5*time.Second)
		if next, ok, err := d.db.NextPublishWebhookDue(ctx); err == nil && ok {
			wait = max(min(next.Sub(d.opts.now()), wait), 10*time.Millisecond)
		}
		sleep(ctx, d.wakeHooks, wait)
	}
}

// sendDueWebhooks is one round of the webhook sender: it claims the publish
// webhooks due now, a few at a time, and sends them one after the other
// (their claim, webhookLease, outlasts them all); it returns how many it
// claimed.
func (d *Dispatcher) sendDueWebhooks(ctx context.Context) (int, error) {
	due, err := d.db.ClaimPublishWebhooks(ctx, d.opts.now(), webhookLease, 8)
	if err != nil {
		return 0, err
	}
	for _, w := range due {
		d.sendWebhookRecovered(ctx, w)
	}
	return len(due), nil
}

// sendWebhookRecovered is sendWebhook with a panic logged and counted; the
// request is retried after the backoff, like a failed one, so that a panic
// that repeats ends with WebhookMaxAge instead of spinning.
func (d *Dispatcher) sendWebhookRecovered(ctx context.Context, w storage.PublishWebhook) {
	if d.panics.Do(d.log, "publish webhook", func() { d.sendWebhook(ctx, w) }, zap.String("publish", w.PublishID)) {
		if err := d.db.RetryPublishWebhook(ctx, w.ID, d.opts.now().Add(d.backoff(w.Attempts, 0))); err != nil && ctx.Err() == nil {
			d.log.Error("updating the publish webhook outbox", zap.Error(err))
		}
	}
}

func (d *Dispatcher) sendWebhook(ctx context.Context, w storage.PublishWebhook) {
	in := d.instances.ByID(w.InstanceID)
	if in == nil || d.opts.now().Sub(w.CreatedAt) > d.opts.WebhookMaxAge {
		d.log.Warn("publish webhook abandoned", zap.String("url", text.RedactURL(w.URL)), zap.Int("attempts", w.Attempts))
		if err := d.db.DeletePublishWebhook(ctx, w.ID); err != nil && ctx.Err() == nil {
			d.log.Error("deleting a publish webhook", zap.Error(err))
		}
		return
	}
	ok := false
	body := encodeWebhook(w)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(WebhookSignatureHeader, SignWebhook(in.SecretKey, body))
		client := d.opts.WebhookClient
		if w.Guarded {
			client = d.guardedHooks
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			ok = resp.StatusCode >= 200 && resp.StatusCode < 300
		}
	}
	if ctx.Err() != nil {
		return
	}
	if ok {
		err = d.db.DeletePublishWebhook(ctx, w.ID)
	} else {
		err = d.db.RetryPublishWebhook(ctx, w.ID, d.opts.now().Add(d.backoff(w.Attempts, 0)))
	}
	if err != nil && ctx.Err() == nil {
		d.log.Error("updating the publish webhook outbox", zap.Error(err))
	}
}

// encodeWebhook builds the body of a queued publish webhook from the facts
// storage kept: the publish as the event left it.
func encodeWebhook(w storage.PublishWebhook) []byte {
	b, _ := json.Marshal(publish.PublishWebhook{
		Event: publish.PublishWebhookEvent(w.Event), InstanceID: w.InstanceID, PublishID: w.PublishID,
		State: publish.PublishState(w.State), Targeted: w.Targeted, Sent: w.Sent, Failed: w.Failed, TimeMs: w.At.UnixMilli(),
	})
	return b
}
