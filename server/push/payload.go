package push

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/heraldrt/herald/storage"
)

// ErrNoPayload means a publish holds none of the apns, fcm and web
// payloads. ParsePayload's *PayloadError for it wraps it.
var ErrNoPayload = errors.New("push: a publish needs at least one of apns, fcm and web")

// PayloadError says how a publish's gateway payload does not match its
// schema; the Publish API answers it with 422.
type PayloadError struct {
	Field  string // e.g. "fcm.notification.title"
	Reason string // e.g. "must be a string"
	err    error  // the sentinel it wraps (ErrNoPayload), or nil
}

func (e *PayloadError) Error() string { return e.Field + " " + e.Reason }

// Unwrap returns ErrNoPayload for a publish without any payload, else nil.
func (e *PayloadError) Unwrap() error { return e.err }

// Payload is a publish's gateway payloads, checked. Nil members were not given.
type Payload struct {
	APNs *APNsPayload
	FCM  *FCMPayload
	Web  *WebPayload
}

// Platforms returns the platforms the payload can reach.
func (p *Payload) Platforms() map[storage.Platform]bool {
	return map[storage.Platform]bool{
		storage.PlatformAPNs: p.APNs != nil,
		storage.PlatformFCM:  p.FCM != nil,
		storage.PlatformWeb:  p.Web != nil,
	}
}

// APNsPayload is the Beams `apns` object: the APNs body plus the optional
// `headers` that become request headers.
type APNsPayload struct {
	body       map[string]json.RawMessage // without "headers"
	PushType   string                     // apns-push-type
	Priority   string                     // apns-priority
	Expiration string                     // apns-expiration, Unix seconds
	CollapseID string                     // apns-collapse-id
	hasAlert   bool
	data       map[string]json.RawMessage // the body's "data" object, nil when absent
}

// FCMPayload is the Beams `fcm` object in the legacy FCM shape.
type FCMPayload struct {
	Notification map[string]any    // android.notification fields
	Data         map[string]string // string values, as FCM v1 requires
	TTLSeconds   *int64
	Priority     string // NORMAL or HIGH; "" for the default
	CollapseKey  string
}

// WebPayload is the Beams `web` object.
type WebPayload struct {
	notification json.RawMessage // nil when absent
	data         map[string]json.RawMessage
	TTLSeconds   int // the TTL header
}

// DefaultWebTTL is the Web Push TTL when the payload sets none: four weeks,
// what push services keep at most.
const DefaultWebTTL = 28 * 24 * 3600

const maxTTLSeconds = 28 * 24 * 3600

// ParsePayload checks the raw `apns`, `fcm` and `web` objects of a publish
// (nil = not given) and returns them parsed. Schema mismatches are
// *PayloadError; at least one payload must be given.
func ParsePayload(apns, fcm, web json.RawMessage) (*Payload, error) {
	var p Payload
	var err error
	if isGiven(apns) {
		if p.APNs, err = parseAPNs(apns); err != nil {
			return nil, err
		}
	}
	if isGiven(fcm) {
		if p.FCM, err = parseFCM(fcm); err != nil {
			return nil, err
		}
	}
	if isGiven(web) {
		if p.Web, err = parseWeb(web); err != nil {
			return nil, err
		}
	}
	if p.APNs == nil && p.FCM == nil && p.Web == nil {
		return nil, &PayloadError{Field: "apns, fcm, web", Reason: "must hold at least one gateway payload", err: ErrNoPayload}
	}
	return &p, nil
}

// ParseStoredPayload parses the {"apns","fcm","web"} object a publish was stored with.
func ParseStoredPayload(raw json.RawMessage) (*Payload, error) {
	var all struct {
		APNs json.RawMessage `json:"apns"`
		FCM  json.RawMessage `json:"fcm"`
		Web  json.RawMessage `json:"web"`
	}
	if err := json.Unmarshal(raw, &all); err != nil {
		return nil, err
	}
	return ParsePayload(all.APNs, all.FCM, all.Web)
}

func isGiven(raw json.RawMessage) bool {
	return len(bytes.TrimSpace(raw)) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// object decodes raw as a JSON object, or fails naming field.
func object(raw json.RawMessage, field string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, &PayloadError{Field: field, Reason: "must be an object"}
	}
	return m, nil
}

func optionalObject(m map[string]json.RawMessage, key, field string) (map[string]json.RawMessage, error) {
	raw, ok := m[key]
	if !ok || !isGiven(raw) {
		return nil, nil
	}
	return object(raw, field+"."+key)
}

func stringField(m map[string]json.RawMessage, key, field string) (string, bool, error) {
	raw, ok := m[key]
	if !ok || !isGiven(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, &PayloadError{Field: field + "." + key, Reason: "must be a string"}
	}
	return s, true, nil
}

func intField(m map[string]json.RawMessage, key, field string, lo, hi int64) (*int64, error) {
	raw, ok := m[key]
	if !ok || !isGiven(raw) {
		return nil, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err != nil || n < lo || n > hi {
		return nil, &PayloadError{Field: field + "." + key, Reason: fmt.Sprintf("must be an integer from %d to %d", lo, hi)}
	}
	return &n, nil
}

func parseAPNs(raw json.RawMessage) (*APNsPayload, error) {
	body, err := object(raw, "apns")
	if err != nil {
		return nil, err
	}
	p := &APNsPayload{body: body}
	aps, err := optionalObject(body, "aps", "apns")
	if err != nil {
		return nil, err
	}
	if p.data, err = optionalObject(body, "data", "apns"); err != nil {
		return nil, err
	}
	headers, err := optionalObject(body, "headers", "apns")
	if err != nil {
		return nil, err
	}
	delete(body, "headers")
	for _, h := range []struct {
		name string
		dst  *string
	}{{"apns-push-type", &p.PushType}, {"apns-priority", &p.Priority}, {"apns-expiration", &p.Expiration}, {"apns-collapse-id", &p.CollapseID}} {
		if *h.dst, _, err = stringField(headers, h.name, "apns.headers"); err != nil {
			return nil, err
		}
	}
	switch {
	case p.Priority != "" && p.Priority != "10" && p.Priority != "5" && p.Priority != "1":
		return nil, &PayloadError{Field: "apns.headers.apns-priority", Reason: "must be 10, 5 or 1"}
	case p.Expiration != "" && strings.Trim(p.Expiration, "0123456789") != "":
		return nil, &PayloadError{Field: "apns.headers.apns-expiration", Reason: "must be Unix seconds"}
	case len(p.CollapseID) > 64:
		return nil, &PayloadError{Field: "apns.headers.apns-collapse-id", Reason: "must be at most 64 bytes"}
	}
	_, p.hasAlert = aps["alert"]
	if p.PushType == "" {
		p.PushType = "alert"
		if _, ok := aps["content-available"]; ok && !p.hasAlert && aps["sound"] == nil && aps["badge"] == nil {
			p.PushType = "background"
		}
	}
	if p.Priority == "" {
		p.Priority = "10"
		if p.PushType == "background" {
			p.Priority = "5"
		}
	}
	return p, nil
}

// fcmNotificationFields are the legacy notification keys with an HTTP v1
// android.notification counterpart (legacy name -> v1 name).
var fcmNotificationFields = map[string]string{
	"title": "title", "body": "body", "icon": "icon", "color": "color", "sound": "sound", "tag": "tag",
	"click_action": "click_action", "body_loc_key": "body_loc_key", "title_loc_key": "title_loc_key",
	"channel_id": "channel_id", "android_channel_id": "channel_id", "image": "image", "ticker": "ticker",
}

func parseFCM(raw json.RawMessage) (*FCMPayload, error) {
	m, err := object(raw, "fcm")
	if err != nil {
		return nil, err
	}
	p := &FCMPayload{}
	notification, err := optionalObject(m, "notification", "fcm")
	if err != nil {
		return nil, err
	}
	if notification != nil {
		p.Notification = map[string]any{}
		for k, v := range notification {
			if name, ok := fcmNotificationFields[k]; ok {
				s, given, err := stringField(notification, k, "fcm.notification")
				if err != nil {
					return nil, err
				}
				if given {
					p.Notification[name] = s
				}
				continue
			}
			if k == "body_loc_args" || k == "title_loc_args" {
				var args []string
				if err := json.Unmarshal(v, &args); err != nil {
					return nil, &PayloadError{Field: "fcm.notification." + k, Reason: "must be an array of strings"}
				}
				p.Notification[k] = args
			}
		}
	}
	data, err := optionalObject(m, "data", "fcm")
	if err != nil {
		return nil, err
	}
	if data != nil {
		p.Data = make(map[string]string, len(data)+1)
		for k, v := range data {
			var s string
			if json.Unmarshal(v, &s) == nil {
				p.Data[k] = s
			} else {
				p.Data[k] = string(v)
			}
		}
		delete(p.Data, "pusher") // reserved for the metadata
	}
	if p.TTLSeconds, err = intField(m, "time_to_live", "fcm", 0, maxTTLSeconds); err != nil {
		return nil, err
	}
	prio, _, err := stringField(m, "priority", "fcm")
	if err != nil {
		return nil, err
	}
	switch prio {
	case "":
	case "normal", "high":
		p.Priority = strings.ToUpper(prio)
	default:
		return nil, &PayloadError{Field: "fcm.priority", Reason: "must be normal or high"}
	}
	if p.CollapseKey, _, err = stringField(m, "collapse_key", "fcm"); err != nil {
		return nil, err
	}
	return p, nil
}

func parseWeb(raw json.RawMessage) (*WebPayload, error) {
	m, err := object(raw, "web")
	if err != nil {
		return nil, err
	}
	p := &WebPayload{TTLSeconds: DefaultWebTTL}
	notification, err := optionalObject(m, "notification", "web")
	if err != nil {
		return nil, err
	}
	if notification != nil {
		for _, k := range []string{"title", "body", "icon", "deep_link"} {
			if _, _, err := stringField(notification, k, "web.notification"); err != nil {
				return nil, err
			}
		}
		if v, ok := notification["hide_notification_if_site_has_focus"]; ok && isGiven(v) {
			var b bool
			if json.Unmarshal(v, &b) != nil {
				return nil, &PayloadError{Field: "web.notification.hide_notification_if_site_has_focus", Reason: "must be a boolean"}
			}
		}
		p.notification = m["notification"]
	}
	if p.data, err = optionalObject(m, "data", "web"); err != nil {
		return nil, err
	}
	ttl, err := intField(m, "time_to_live", "web", 0, maxTTLSeconds)
	if err != nil {
		return nil, err
	}
	if ttl != nil {
		p.TTLSeconds = int(*ttl)
	}
	return p, nil
}

// Metadata is what every delivered payload carries under data.pusher, for the
// client SDKs' delivery and open reports.
type Metadata struct {
	InstanceID            string `json:"instanceId"`
	PublishID             string `json:"publishId"`
	HasDisplayableContent bool   `json:"hasDisplayableContent"`
	HasData               bool   `json:"hasData"`
	UserID                string `json:"userId,omitempty"` // the target user, on publishes to users
}

// Prepared is a publish's payloads encoded once for all its deliveries (a
// publish to interests) or once per target user (a publish to users).
type Prepared struct {
	InstanceID string
	PublishID  string
	UserID     string // "" for a publish to interests

	APNsBody []byte       // the APNs request body, with data.pusher
	APNs     *APNsPayload // its headers

	fcmTail []byte // the v1 message without "token", from its first field on
	FCM     *FCMPayload

	WebBody []byte // the plaintext Web Push message
	Web     *WebPayload
}

// Prepare encodes the payloads of publish publishID for sending. userID is
// the target user of a publish to users, carried in data.pusher.userId; ""
// for a publish to interests.
func Prepare(instanceID, publishID, userID string, p *Payload) (*Prepared, error) {
	out := &Prepared{InstanceID: instanceID, PublishID: publishID, UserID: userID, APNs: p.APNs, FCM: p.FCM, Web: p.Web}
	meta := func(displayable, hasData bool) Metadata {
		return Metadata{InstanceID: instanceID, PublishID: publishID, HasDisplayableContent: displayable, HasData: hasData, UserID: userID}
	}
	var err error
	if a := p.APNs; a != nil {
		body := make(map[string]any, len(a.body)+1)
		for k, v := range a.body {
			body[k] = v
		}
		data := make(map[string]any, len(a.data)+1)
		for k, v := range a.data {
			data[k] = v
		}
		hasData := len(a.data) > 0
		data["pusher"] = meta(a.hasAlert, hasData)
		body["data"] = data
		if out.APNsBody, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	if f := p.FCM; f != nil {
		data := make(map[string]string, len(f.Data)+1)
		for k, v := range f.Data {
			data[k] = v
		}
		m, err := json.Marshal(meta(f.Notification != nil, len(f.Data) > 0))
		if err != nil {
			return nil, err
		}
		data["pusher"] = string(m)
		android := map[string]any{}
		if f.Notification != nil {
			android["notification"] = f.Notification
		}
		if f.TTLSeconds != nil {
			android["ttl"] = strconv.FormatInt(*f.TTLSeconds, 10) + "s"
		}
		if f.Priority != "" {
			android["priority"] = f.Priority
		}
		if f.CollapseKey != "" {
			android["collapse_key"] = f.CollapseKey
		}
		msg := map[string]any{"data": data}
		if len(android) > 0 {
			msg["android"] = android
		}
		b, err := json.Marshal(msg)
		if err != nil {
			return nil, err
		}
		out.fcmTail = b[1:] // `"android":…}` — the token goes in front
	}
	if w := p.Web; w != nil {
		data := make(map[string]any, len(w.data)+1)
		for k, v := range w.data {
			data[k] = v
		}
		data["pusher"] = meta(w.notification != nil, len(w.data) > 0)
		msg := map[string]any{"data": data}
		if w.notification != nil {
			msg["notification"] = w.notification
		}
		if out.WebBody, err = json.Marshal(msg); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// FCMRequest returns the HTTP v1 messages:send body for one token.
func (p *Prepared) FCMRequest(token string) []byte {
	tok, _ := json.Marshal(token)
	b := make([]byte, 0, len(p.fcmTail)+len(tok)+32)
	b = append(b, `{"message":{"token":`...)
	b = append(b, tok...)
	b = append(b, ',')
	b = append(b, p.fcmTail...)
	return append(b, '}')
}

// errNotConfigured is the failure of a delivery on a gateway the instance
// has no credentials for.
var errNotConfigured = errors.New("gateway not configured for the instance")

// retryAfter parses a Retry-After header (seconds or an HTTP date).
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := time.Parse(time.RFC1123, v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
