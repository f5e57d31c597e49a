package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/gen/publish"
	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/internal/clientrate"
	"github.com/heraldrt/herald/server/internal/text"
	"github.com/heraldrt/herald/server/netguard"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/storage"
)

// Limits of the Publish API (spec/publish.yaml states the same).
const (
	// MaxInterestsPublishBytes caps a publish-to-interests body.
	MaxInterestsPublishBytes = 10 * 1024
	// MaxUsersPublishBytes caps a publish-to-users body.
	MaxUsersPublishBytes = 200 * 1024
	// MaxPublishInterests is the most interests one publish may name.
	MaxPublishInterests = 100
	// MaxPublishUsers is the most users one publish may name.
	MaxPublishUsers = 1000
	// MaxUserIDBytes is the longest user id, in bytes of UTF-8.
	MaxUserIDBytes = 164
	// PublishRateLimit is the most Publish API requests per second and
	// instance, with bursts of as many. On a database nodes share it holds
	// over all of them (storage.DB.TakePublishToken).
	PublishRateLimit = 100

	maxWebhookURLLength = 2048
	publishIDPrefix     = "pubid-"
)

// PublishNotifier learns about newly stored publishes (the push dispatcher).
type PublishNotifier interface {
	// Published is told the id of each stored publish with its payload as
	// parsed here, which the dispatcher then need not parse again.
	Published(publishID string, payload *push.Payload)
}

// PublishAPI implements the Push Publish API over storage.
type PublishAPI struct {
	db        *storage.DB
	instances InstanceLookup
	notifier  PublishNotifier
	log       *zap.Logger
	limiter   *clientrate.Buckets // per instance: PublishRateLimit a second, bursts of as many
	// shared: the database is shared by several nodes (PostgreSQL), and the
	// rate limit is held in it rather than in limiter, which then serves
	// only while the database fails (see allow).
	shared       bool
	limitRefused atomic.Uint64 // requests answered 429
	limitErrors  atomic.Uint64 // database failures of the shared rate limit
	limitWarned  warnLimit     // spaces their warnings (limitWarnEvery, on now)
	now          func() time.Time
	// idem honours Idempotency-Key on publishes (PublishOptions.Idempotency);
	// nil: the header is ignored.
	idem *idempotency.Guard
	// strangerHooks says where webhook URLs that are not the instance's
	// own (push_if_offline's, from an app's server) may lead: the Web Push
	// endpoints' rules (PublishOptions.WebPushAllowedHosts).
	strangerHooks *netguard.Policy
}

// PublishOptions are the optional parts of the Publish API; the zero value
// ignores the Idempotency-Key header and lets push_if_offline's webhook URLs
// lead only to https on hosts that are no literal internal address.
type PublishOptions struct {
	// Idempotency makes the API honour the Idempotency-Key header on
	// publishes, with the guard's keys scoped per instance; nil: the header
	// is ignored.
	Idempotency *idempotency.Guard
	// WebPushAllowedHosts lets the webhook URLs of triggers'
	// push_if_offline lead to these hosts (names or IP addresses, each
	// optionally with ":port"; HERALD_WEBPUSH_ALLOWED_HOSTS) when they are
	// private or plain http, as Web Push endpoints may. Other such URLs
	// must be https to a host that is no literal internal address, and
	// their webhooks are sent only to public addresses (checked when
	// dialled).
	WebPushAllowedHosts []string
}

// limitWarnEvery spaces the warnings of the shared rate limit's database
// failures: a database that is down would otherwise write one per request.
const limitWarnEvery = 10 * time.Second

var _ publish.StrictServerInterface = (*PublishAPI)(nil)

// NewPublishAPI returns the Publish API handler, with the optional parts
// opts gives; notifier (may be nil) is told about every stored publish.
func NewPublishAPI(db *storage.DB, instances InstanceLookup, notifier PublishNotifier, log *zap.Logger, opts PublishOptions) *PublishAPI {
	api := &PublishAPI{db: db, instances: instances, notifier: notifier, log: log.Named("publish"),
		limiter: clientrate.New(PublishRateLimit, PublishRateLimit), shared: db.Shared(), now: time.Now,
		idem: opts.Idempotency, strangerHooks: netguard.NewPolicy(opts.WebPushAllowedHosts)}
	api.limitWarned.every = limitWarnEvery
	return api
}

// PublishLimitStats are the figures of the Publish API's rate limit on this
// node, for the metrics.
type PublishLimitStats struct {
	Refused uint64 // requests answered 429
	// DatabaseErrors is how many requests found the database failing when
	// they came to take from the instance's shared rate limit (each was
	// then limited by this node's own bucket instead); 0 on a database of
	// one node.
	DatabaseErrors uint64
}

// LimitStats returns the rate limit's figures.
func (api *PublishAPI) LimitStats() PublishLimitStats {
	return PublishLimitStats{Refused: api.limitRefused.Load(), DatabaseErrors: api.limitErrors.Load()}
}

// mount binds the API's operations on g (Mount says what comes before).
func (api *PublishAPI) mount(g gin.IRouter) {
	onError := errorHooks(api.log)
	strict := publish.NewStrictHandlerWithOptions(api, nil, publish.StrictGinServerOptions{
		RequestErrorHandlerFunc:  publishRequestErrorHook,
		HandlerErrorFunc:         onError,
		ResponseErrorHandlerFunc: onError,
	})
	publish.RegisterHandlersWithOptions(g, strict, publish.GinServerOptions{ErrorHandler: paramErrorHook})
}

// idempotencyKeys guards the publishing operations with their
// Idempotency-Key headers; it runs after the body is read.
func (api *PublishAPI) idempotencyKeys() gin.HandlerFunc {
	return idempotent(api.idem, api.log, idempotentRequest{
		applies: func(c *gin.Context) bool {
			return c.Request.Method == http.MethodPost && strings.HasPrefix(c.FullPath(), publishesRoute)
		},
		scope: func(c *gin.Context) string { return c.Value(instanceContextKey).(*storage.Instance).ID },
		body: func(c *gin.Context) []byte {
			b, _ := c.Value(publishBodyKey).([]byte)
			return b
		},
		// The keys are in the database: when it fails, it is most likely
		// unavailable, and the publish cannot be stored either.
		unavailable: databaseUnavailable,
	})
}

// publishesRoute starts the routes of the three publishing operations (and
// of GET …/publishes/{publish_id}, which is not a POST).
const publishesRoute = "/publish_api/v1/instances/:instance_id/publishes"

// publishBodyKey is where publishBody leaves the bytes of the body it read.
const publishBodyKey = "herald.publish.body"

// secretKeyAuth requires Authorization: Bearer <the instance's secret key>:
// 400 when the header is missing, 401 when the key is wrong.
func secretKeyAuth(c *gin.Context) {
	in := c.Value(instanceContextKey).(*storage.Instance)
	h := c.GetHeader("Authorization")
	if h == "" {
		writeError(c, badRequest(KindMissingAuthorization, "The request needs an Authorization: Bearer <secret key> header."))
		return
	}
	scheme, key, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(key)), []byte(in.SecretKey)) != 1 {
		writeError(c, newError(http.StatusUnauthorized, KindIncorrectApiKey, "The bearer token is not this instance's secret key."))
		return
	}
	c.Next()
}

// rateLimit refuses a request over the instance's PublishRateLimit with 429
// and the error body, without a Retry-After header.
func (api *PublishAPI) rateLimit(c *gin.Context) {
	in := c.Value(instanceContextKey).(*storage.Instance)
	if err := api.takeToken(c.Request.Context(), in.ID); err != nil {
		writeError(c, err)
		return
	}
	c.Next()
}

// takeToken takes a request of the instance's PublishRateLimit: nil when
// there was a token, the 429 answer (counted) when there was none.
func (api *PublishAPI) takeToken(ctx context.Context, instanceID string) *Error {
	if api.allow(ctx, instanceID) {
		return nil
	}
	api.limitRefused.Add(1)
	return newError(http.StatusTooManyRequests, KindTooManyRequests, "More than %d requests per second on this instance; slow down.", PublishRateLimit)
}

// allow takes a token from the instance's bucket and reports whether there
// was one. A single node keeps the buckets in memory, with no write per
// request; nodes sharing a database take from a bucket in it, so that N
// nodes do not allow N times the rate.
//
// When the database fails, the request is limited by this node's own bucket,
// as a single node's would be: refusing every request while the database
// blips would be worse than the limit holding per node for that time, and
// letting every request through would be no limit at all. (A publish will
// most likely fail on the database too, with its own 500.) The failure is
// counted (LimitStats) and logged at warn, once every limitWarnEvery,
// unless it was the request's own context ending (its client gone).
func (api *PublishAPI) allow(ctx context.Context, instanceID string) bool {
	now := api.now()
	if !api.shared {
		return api.limiter.Allow(instanceID, now)
	}
	ok, err := api.db.TakePublishToken(ctx, instanceID, now, PublishRateLimit, PublishRateLimit)
	if err == nil {
		return ok
	}
	if ctx.Err() == nil {
		n := api.limitErrors.Add(1)
		if api.limitWarned.allowAt(now) {
			api.log.Warn("the database failed to count a request against the instance's rate limit; limiting on this node alone meanwhile",
				zap.String("instance", instanceID), zap.Uint64("failures", n), zap.Error(err))
		}
	}
	return api.limiter.Allow(instanceID, now)
}

// publishBody reads a body of at most the route's limit (10 KiB for
// interests, 200 KiB for users; 400 beyond) and requires JSON for it. A
// request holding the NUL character, or JSON the databases do not both
// store, is refused (refuseUnstorable).
func publishBody(c *gin.Context) {
	r := c.Request
	if r.Body == nil || r.Body == http.NoBody || r.Method == http.MethodGet || r.Method == http.MethodDelete {
		if !refuseNUL(c, nil) {
			c.Next()
		}
		return
	}
	limit := int64(MaxInterestsPublishBytes)
	if strings.HasSuffix(c.FullPath(), "/users") {
		limit = MaxUsersPublishBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(c, badRequest(KindBodyTooLarge, "The request body is larger than %d KiB.", limit/1024))
			return
		}
		writeError(c, badRequest(KindUnreadableBody, "The request body could not be read."))
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(c, badRequest(KindInvalidContentType, "A request body must be sent with Content-Type: application/json."))
		return
	}
	if refuseUnstorable(c, body) {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	c.Set(publishBodyKey, body)
	c.Next()
}

// publishRequestErrorHook answers bodies that do not decode: 400 when the
// body is not a JSON object, 422 when a field has the wrong type.
func publishRequestErrorHook(c *gin.Context, err error) {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		writeError(c, newError(http.StatusUnprocessableEntity, KindInvalidRequest, "Field %q must be %s, not %s.", typeErr.Field, jsonKind(typeErr.Type.Kind()), typeErr.Value))
		return
	}
	requestErrorHook(c, err)
}

func unprocessable(kind, format string, args ...any) *Error {
	return newError(http.StatusUnprocessableEntity, kind, format, args...)
}

// publishRequest is what both publish bodies have in common.
type publishRequest struct {
	kind       storage.PublishTargetKind
	targets    []string
	webhookURL *string
	apns, fcm  *json.RawMessage
	web        *json.RawMessage
	// hookGuard, when set, judges webhookURL (not the instance's own):
	// see PublishAPI.strangerHooks.
	hookGuard *netguard.Policy
	guarded   bool
}

// PublishToInterests implements POST …/publishes/interests.
func (api *PublishAPI) PublishToInterests(ctx context.Context, req publish.PublishToInterestsRequestObject) (publish.PublishToInterestsResponseObject, error) {
	b := req.Body
	id, err := api.publish(ctx, publishRequest{kind: storage.TargetInterests, targets: b.Interests, webhookURL: b.WebhookURL, apns: b.Apns, fcm: b.Fcm, web: b.Web})
	if err != nil {
		return nil, err
	}
	return publish.PublishToInterests200JSONResponse{PublishedJSONResponse: publish.PublishedJSONResponse{PublishID: id}}, nil
}

// PublishToInterestsBare implements POST …/publishes, the Go SDK's path.
func (api *PublishAPI) PublishToInterestsBare(ctx context.Context, req publish.PublishToInterestsBareRequestObject) (publish.PublishToInterestsBareResponseObject, error) {
	b := req.Body
	id, err := api.publish(ctx, publishRequest{kind: storage.TargetInterests, targets: b.Interests, webhookURL: b.WebhookURL, apns: b.Apns, fcm: b.Fcm, web: b.Web})
	if err != nil {
		return nil, err
	}
	return publish.PublishToInterestsBare200JSONResponse{PublishedJSONResponse: publish.PublishedJSONResponse{PublishID: id}}, nil
}

// PublishToUsers implements POST …/publishes/users.
func (api *PublishAPI) PublishToUsers(ctx context.Context, req publish.PublishToUsersRequestObject) (publish.PublishToUsersResponseObject, error) {
	b := req.Body
	id, err := api.publish(ctx, publishRequest{kind: storage.TargetUsers, targets: b.Users, webhookURL: b.WebhookURL, apns: b.Apns, fcm: b.Fcm, web: b.Web})
	if err != nil {
		return nil, err
	}
	return publish.PublishToUsers200JSONResponse{PublishedJSONResponse: publish.PublishedJSONResponse{PublishID: id}}, nil
}

// checkTargets validates the interests or users of a publish (422).
func checkTargets(kind storage.PublishTargetKind, targets []string) error {
	if kind == storage.TargetInterests {
		if len(targets) < 1 || len(targets) > MaxPublishInterests {
			return unprocessable(KindInvalidInterests, "interests must hold 1 to %d interest names.", MaxPublishInterests)
		}
		for _, s := range targets {
			if !ValidInterestName(s) {
				return unprocessable(KindInvalidInterestName, "Interest name %q is invalid: use 1 to %d characters of A-Z a-z 0-9 _ - = @ , . ;", text.Truncate(s, 200), MaxInterestNameLength)
			}
		}
		return nil
	}
	if len(targets) < 1 || len(targets) > MaxPublishUsers {
		return unprocessable(KindInvalidUsers, "users must hold 1 to %d user ids.", MaxPublishUsers)
	}
	for _, s := range targets {
		if err := checkUserID(s); err != nil {
			err.Status = http.StatusUnprocessableEntity
			return err
		}
	}
	return nil
}

// checkUserID validates a user id: 1 to 164 bytes of UTF-8 (400).
func checkUserID(s string) *Error {
	if s == "" || len(s) > MaxUserIDBytes || !utf8.ValidString(s) {
		return badRequest(KindInvalidUserID, "User id %q is invalid: use 1 to %d bytes of UTF-8.", text.Truncate(s, 200), MaxUserIDBytes)
	}
	return nil
}

func checkWebhookURL(s string) error {
	u, err := url.Parse(s)
	if len(s) > maxWebhookURLLength || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return unprocessable(KindInvalidWebhookUrl, "webhookUrl must be an http:// or https:// URL of at most %d characters.", maxWebhookURLLength)
	}
	return nil
}

func rawOrNil(p *json.RawMessage) json.RawMessage {
	if p == nil {
		return nil
	}
	return *p
}

// publish validates and stores a publish, then wakes the dispatcher.
func (api *PublishAPI) publish(ctx context.Context, r publishRequest) (string, error) {
	in, ctx := requestScope(ctx)
	p, err := preparePublish(r)
	if err != nil {
		return "", err
	}
	return api.store(ctx, in, p)
}

// preparedPublish is a publish that passed every check, ready to store.
type preparedPublish struct {
	kind    storage.PublishTargetKind
	targets []string
	webhook string
	guarded bool          // the webhook goes through the Web Push endpoints' guard
	payload []byte        // the payloads given, as stored
	parsed  *push.Payload // and as the dispatcher reads them
}

// preparePublish checks a publish (422 for what breaks a rule) and encodes
// its payloads for storage.
func preparePublish(r publishRequest) (preparedPublish, error) {
	if err := checkTargets(r.kind, r.targets); err != nil {
		return preparedPublish{}, err
	}
	webhook := ""
	if r.webhookURL != nil && *r.webhookURL != "" {
		if err := checkWebhookURL(*r.webhookURL); err != nil {
			return preparedPublish{}, err
		}
		var refused *netguard.RefusedError
		if r.guarded && errors.As(r.hookGuard.CheckURL(*r.webhookURL), &refused) {
			return preparedPublish{}, unprocessable(KindInvalidWebhookUrl, "webhookUrl's host %q is not allowed (%s): it must be an https URL of a public host.",
				text.Truncate(refused.Target, 100), refused.Reason)
		}
		webhook = *r.webhookURL
	}
	apns, fcm, web := rawOrNil(r.apns), rawOrNil(r.fcm), rawOrNil(r.web)
	parsed, err := push.ParsePayload(apns, fcm, web)
	if err != nil {
		var pe *push.PayloadError
		switch {
		case errors.Is(err, push.ErrNoPayload):
			return preparedPublish{}, unprocessable(KindMissingPayload, "A publish needs at least one of apns, fcm and web.")
		case errors.As(err, &pe):
			return preparedPublish{}, unprocessable(KindInvalidPayload, "%s %s.", pe.Field, pe.Reason)
		}
		return preparedPublish{}, err
	}
	stored := map[string]json.RawMessage{}
	for k, v := range map[string]json.RawMessage{"apns": apns, "fcm": fcm, "web": web} {
		if len(v) > 0 && string(v) != "null" {
			stored[k] = v
		}
	}
	payload, err := json.Marshal(stored)
	if err != nil {
		return preparedPublish{}, err
	}
	// The Publish API checked its whole body already; a trigger's
	// push_if_offline is checked here.
	var je *storage.JSONError
	if errors.As(storage.CheckJSON(payload), &je) {
		return preparedPublish{}, unstorableJSON(je)
	}
	return preparedPublish{kind: r.kind, targets: r.targets, webhook: webhook, guarded: r.guarded, payload: payload, parsed: parsed}, nil
}

// store stores a prepared publish of instance in within the instance's
// daily quota (402 beyond it) and wakes the dispatcher; it returns the
// publish's id.
func (api *PublishAPI) store(ctx context.Context, in *storage.Instance, r preparedPublish) (string, error) {
	t := api.now().UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	p, err := api.db.CreatePublish(ctx, storage.Publish{
		ID: publishIDPrefix + uuid.Must(uuid.NewRandomFromReader(rand.Reader)).String(), InstanceID: in.ID,
		TargetKind: r.kind, Targets: r.targets, Payload: r.payload, WebhookURL: r.webhook, WebhookGuarded: r.guarded,
	}, in.PublishQuota, day)
	if errors.Is(err, storage.ErrQuotaExceeded) {
		return "", newError(http.StatusPaymentRequired, KindQuotaExceeded, "The instance has used its quota of %d publishes for today (UTC).", in.PublishQuota)
	}
	if err != nil {
		return "", err
	}
	if api.notifier != nil {
		api.notifier.Published(p.ID, r.parsed)
	}
	return p.ID, nil
}

// GetPublish implements GET …/publishes/{publish_id}.
func (api *PublishAPI) GetPublish(ctx context.Context, req publish.GetPublishRequestObject) (publish.GetPublishResponseObject, error) {
	in, ctx := requestScope(ctx)
	p, err := api.db.GetPublish(ctx, in.ID, req.PublishID)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, newError(http.StatusNotFound, KindPublishNotFound, "There is no publish %s on this instance.", text.Truncate(req.PublishID, 128))
	}
	if err != nil {
		return nil, err
	}
	delivered, opened, err := api.db.PublishReportCounts(ctx, in.ID, p.ID)
	if err != nil {
		return nil, err
	}
	out := publish.GetPublish200JSONResponse{
		PublishID: p.ID, State: publish.PublishState(p.State), Targeted: p.Targeted, Sent: p.Sent, Failed: p.Failed,
		Delivered: delivered, Opened: opened, CreatedAt: p.CreatedAt,
	}
	if !p.FinishedAt.IsZero() {
		f := p.FinishedAt
		out.FinishedAt = &f
	}
	return out, nil
}

func (api *PublishAPI) deleteUser(ctx context.Context, userID string) error {
	in, ctx := requestScope(ctx)
	if err := checkUserID(userID); err != nil {
		return err
	}
	_, err := api.db.DeleteUser(ctx, in.ID, userID)
	return err
}

// DeleteUser implements DELETE /customer_api/v1/instances/{id}/users/{user_id}.
func (api *PublishAPI) DeleteUser(ctx context.Context, req publish.DeleteUserRequestObject) (publish.DeleteUserResponseObject, error) {
	if err := api.deleteUser(ctx, req.UserID); err != nil {
		return nil, err
	}
	return doneResponse{}, nil
}

// DeleteUserViaUserAPI implements DELETE /user_api/v1/instances/{id}/users/{user_id}.
func (api *PublishAPI) DeleteUserViaUserAPI(ctx context.Context, req publish.DeleteUserViaUserAPIRequestObject) (publish.DeleteUserViaUserAPIResponseObject, error) {
	if err := api.deleteUser(ctx, req.UserID); err != nil {
		return nil, err
	}
	return doneResponse{}, nil
}

// doneResponse answers 200 with the body {}. The generated
// DeleteUser200JSONResponse embeds the Done map in a struct and so encodes
// as {"DoneJSONResponse":{}}.
type doneResponse struct{}

func (doneResponse) VisitDeleteUserResponse(w http.ResponseWriter) error { return writeDone(w) }

func (doneResponse) VisitDeleteUserViaUserAPIResponse(w http.ResponseWriter) error {
	return writeDone(w)
}

func writeDone(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err := w.Write([]byte("{}\n"))
	return err
}
