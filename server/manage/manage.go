// Package manage holds the rules for creating and changing Channels apps and
// Push instances, shared by the `herald apps` / `herald instances` commands
// and the admin HTTP API, so both accept and refuse exactly the same things.
package manage

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/heraldrt/herald/server/internal/text"
	"github.com/heraldrt/herald/storage"
)

// InvalidError is a value that breaks a rule; the message says which, in
// words fit for the CLI and the admin API's error description alike.
type InvalidError struct{ msg string }

func (e *InvalidError) Error() string { return e.msg }

// IsInvalid reports whether err (or one of the errors joined in it) is an
// *InvalidError: the caller's input, not the system, was at fault.
func IsInvalid(err error) bool {
	var e *InvalidError
	return errors.As(err, &e)
}

func invalid(format string, args ...any) error {
	return &InvalidError{fmt.Sprintf(format, args...)}
}

// Limits of app and instance options.
const (
	// MaxWebhooks is the number of webhook endpoints an app may have.
	MaxWebhooks  = 100
	maxURLLength = 2048
	// MaxHistoryEvents is the most events an app may keep per channel.
	MaxHistoryEvents = 1000
	// MaxHistoryTTL is the longest an app may keep a channel's events.
	MaxHistoryTTL = 7 * 24 * time.Hour
)

// WebhookKinds are the webhook event kinds an app can subscribe to.
var WebhookKinds = []string{"channel_occupied", "channel_vacated", "member_added", "member_removed", "client_event", "cache_miss", "subscription_count"}

// appIDPattern is what an app id may look like: it appears in URL paths
// (/apps/<id>/…), so it is kept to URL-safe characters.
var appIDPattern = regexp.MustCompile(`^[A-Za-z0-9_\-]{1,64}$`)

// credentialPattern is what an app key or secret may look like: it travels in
// query strings and auth strings ("key:signature"), so no ':' or spaces.
var credentialPattern = regexp.MustCompile(`^[A-Za-z0-9_\-.]{1,128}$`)

// ValidInstanceID reports whether id is a UUID in its 36-character text form,
// the only form a Push instance id takes (it appears in every Beams URL).
func ValidInstanceID(id string) bool {
	// uuid.Validate also takes the braced, urn: and unhyphenated forms.
	return len(id) == 36 && uuid.Validate(id) == nil
}

// ValidateApp checks an app before it is created or updated.
func ValidateApp(a storage.App) error {
	var errs []error
	if !appIDPattern.MatchString(a.ID) {
		errs = append(errs, invalid("the app id must be 1 to 64 characters of A-Z a-z 0-9 _ -, not %q", a.ID))
	}
	switch {
	case a.Key == "" || a.Secret == "":
		errs = append(errs, invalid("key and secret may not be empty"))
	case !credentialPattern.MatchString(a.Key) || !credentialPattern.MatchString(a.Secret):
		errs = append(errs, invalid("key and secret must be at most 128 characters of A-Z a-z 0-9 _ - ."))
	}
	if a.MaxConnections < 0 || a.MaxPresenceMembers < 0 || a.MaxPresenceUserInfoBytes < 0 || a.UserAuthTimeout < 0 {
		errs = append(errs, invalid("limits may not be negative"))
	}
	if a.HistoryEvents < 0 || a.HistoryEvents > MaxHistoryEvents {
		errs = append(errs, invalid("history events must be 0 (off) to %d, not %d", MaxHistoryEvents, a.HistoryEvents))
	}
	if a.HistoryTTL < 0 || a.HistoryTTL > MaxHistoryTTL || a.HistoryTTL%time.Millisecond != 0 {
		errs = append(errs, invalid("the history TTL must be whole milliseconds from 0 to %s, not %s", MaxHistoryTTL, a.HistoryTTL))
	}
	if w := a.RecoveryWindow; w != storage.RecoveryOff && (w < 0 || w > MaxHistoryTTL || w%time.Millisecond != 0) {
		errs = append(errs, invalid("the recovery window must be whole milliseconds up to %s, or off, not %s", MaxHistoryTTL, w))
	}
	if a.PushInstance != "" && !ValidInstanceID(a.PushInstance) {
		errs = append(errs, invalid("the push instance must be a Push instance id (a UUID), not %.64q", a.PushInstance))
	}
	if len(a.Webhooks) > MaxWebhooks {
		errs = append(errs, invalid("an app has at most %d webhooks", MaxWebhooks))
	}
	for _, w := range a.Webhooks {
		if err := ValidateWebhook(w); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ValidateWebhook checks one webhook endpoint.
func ValidateWebhook(w storage.Webhook) error { return validateWebhook(w, w.URL) }

// validateWebhook checks w; errors name it as label, shown without user
// info and query (text.RedactURL), where credentials go.
func validateWebhook(w storage.Webhook, label string) error {
	label = text.RedactURL(label)
	if holdsNUL(w.URL, w.ChannelPrefix) {
		return errNUL
	}
	if len(w.URL) > maxURLLength || len(w.ChannelPrefix) > 200 {
		return invalid("webhook %.64q: the URL is limited to %d characters and the channel prefix to 200", label, maxURLLength)
	}
	if !strings.HasPrefix(w.URL, "http://") && !strings.HasPrefix(w.URL, "https://") {
		return invalid("webhook %q: the URL must start with http:// or https://", label)
	}
	for _, kind := range w.EventTypes {
		if !slices.Contains(WebhookKinds, kind) {
			return invalid("webhook %q: unknown event kind %q (kinds: %s)", label, kind, strings.Join(WebhookKinds, ", "))
		}
	}
	return nil
}

// ParseWebhook parses the CLI form URL[,events=kind+kind][,prefix=P][,batch].
func ParseWebhook(spec string) (storage.Webhook, error) {
	parts := strings.Split(spec, ",")
	w := storage.Webhook{URL: parts[0]}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "events":
			w.EventTypes = append(w.EventTypes, strings.Split(v, "+")...)
		case "prefix":
			w.ChannelPrefix = v
		case "batch":
			w.Batch = true
		default:
			return w, invalid("webhook %q: unknown option %q (events=, prefix=, batch)", text.RedactURL(spec), k)
		}
	}
	return w, validateWebhook(w, spec)
}

// ValidateInstance checks an instance before it is created or updated.
func ValidateInstance(in storage.Instance) error {
	var errs []error
	if !ValidInstanceID(in.ID) {
		errs = append(errs, invalid("the instance id must be a UUID, not %q", in.ID))
	}
	if in.SecretKey == "" {
		errs = append(errs, invalid("the secret key may not be empty"))
	}
	if in.PublishQuota < 0 {
		errs = append(errs, invalid("the publish quota may not be negative"))
	}
	if s := in.VAPID.Subject; s != "" && !strings.HasPrefix(s, "mailto:") && !strings.HasPrefix(s, "https:") {
		errs = append(errs, invalid("the VAPID subject must be a mailto: or https: URI, not %q", s))
	}
	for _, f := range []struct {
		name  string
		value string
		max   int
	}{
		{"secret key", in.SecretKey, 256}, {"JWT issuer", in.JWTIssuer, 512}, {"APNs key id", in.APNs.KeyID, 64},
		{"APNs team id", in.APNs.TeamID, 64}, {"APNs topic", in.APNs.Topic, 256}, {"APNs URL", in.APNs.URL, maxURLLength},
		{"FCM URL", in.FCM.URL, maxURLLength}, {"VAPID subject", in.VAPID.Subject, 512},
	} {
		if len(f.value) > f.max {
			errs = append(errs, invalid("the %s is limited to %d characters", f.name, f.max))
		}
	}
	for _, u := range []struct{ name, url string }{{"APNs", in.APNs.URL}, {"FCM", in.FCM.URL}} {
		if u.url != "" && !strings.HasPrefix(u.url, "http://") && !strings.HasPrefix(u.url, "https://") {
			errs = append(errs, invalid("the %s URL must start with http:// or https://, not %q", u.name, text.RedactURL(u.url)))
		}
	}
	if holdsNUL(in.SecretKey, in.JWTIssuer, in.APNs.KeyPEM, in.APNs.KeyID, in.APNs.TeamID, in.APNs.Topic, in.APNs.URL,
		in.APNs.CAPEM, in.FCM.ServiceAccountJSON, in.FCM.URL, in.VAPID.Subject) {
		errs = append(errs, errNUL)
	}
	return errors.Join(errs...)
}

// errNUL refuses the NUL character, which the admin API refuses in every
// request (PostgreSQL's text cannot hold it): the CLI and the settings read
// at start (a TOML file may hold "\u0000", a key file anything) follow the
// same rule.
var errNUL = invalid("no field may hold the NUL character")

// holdsNUL reports whether any of fields holds the NUL character.
func holdsNUL(fields ...string) bool {
	for _, f := range fields {
		if strings.IndexByte(f, 0) >= 0 {
			return true
		}
	}
	return false
}

// RotateAppSecret gives the app a new random secret.
func RotateAppSecret(a *storage.App) { a.Secret = randomHex(10) }

// RotateInstanceSecret gives the instance a new random secret key.
func RotateInstanceSecret(in *storage.Instance) error {
	fresh, err := NewInstance()
	if err != nil {
		return err
	}
	in.SecretKey = fresh.SecretKey
	return nil
}
