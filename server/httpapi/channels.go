package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/oapi-codegen/nullable"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/gen/channels"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/idempotency"
	"github.com/heraldrt/herald/server/signing"
	"github.com/heraldrt/herald/storage"
)

// Limits of the Channels HTTP API (spec/channels.yaml states the same).
const (
	MaxEventDataBytes  = 10 * 1024
	MaxTriggerChannels = 100
	MaxBatchEvents     = 10
	// MaxRequestBodyBytes caps what is read of any request body: ten batch
	// events of 10 KB each with their names and channels fit easily.
	MaxRequestBodyBytes = 256 * 1024
)

// appContextKey is where the authenticated app is kept on the gin context.
const appContextKey = "herald.channels.app"

// AppLookup finds Channels apps by their public key.
type AppLookup interface {
	ByKey(key string) *storage.App
}

// ChannelsAPI implements the Channels HTTP API over the hub.
type ChannelsAPI struct {
	hub  *hub.Hub
	apps AppLookup
	log  *zap.Logger
	now  func() time.Time

	// The parts ChannelsOptions gives, as its fields say.
	onTrigger TriggerHook // admin_hooks.go
	idem      *idempotency.Guard
	history   eventlog.Store // history.go
	pushes    *PublishAPI    // pushoffline.go
}

var _ channels.StrictServerInterface = (*ChannelsAPI)(nil)

// ChannelsOptions are the optional parts of the Channels HTTP API; the zero
// value triggers and reads the hub's channels with none of them.
type ChannelsOptions struct {
	// Idempotency makes the API honour the Idempotency-Key header on
	// triggers and batches, with the guard's keys scoped per app; nil: the
	// header is ignored.
	Idempotency *idempotency.Guard
	// History keeps the events triggered on the channels of the apps that
	// ask for it (storage.App.HistoryEvents), and serves them on GET
	// /apps/{app_id}/channels/{channel_name}/events; nil: no app keeps any.
	History eventlog.Store
	// PushIfOffline makes the API take push_if_offline on triggers,
	// publishing through this Publish API to the Push instance an app is
	// linked to (storage.App.PushInstance); nil: push_if_offline is refused
	// (push_not_linked).
	PushIfOffline *PublishAPI
	// OnTrigger is told of every event published through the API
	// (TriggerHook); nil: no one is.
	OnTrigger TriggerHook
}

// WithDefaults returns o with the defaults in place of its zero fields: a
// hook that does nothing for OnTrigger.
func (o ChannelsOptions) WithDefaults() ChannelsOptions {
	if o.OnTrigger == nil {
		o.OnTrigger = noTrigger
	}
	return o
}

// NewChannelsAPI returns the Channels HTTP API handler, with the optional
// parts opts gives.
func NewChannelsAPI(h *hub.Hub, apps AppLookup, log *zap.Logger, opts ChannelsOptions) *ChannelsAPI {
	opts = opts.WithDefaults()
	return &ChannelsAPI{hub: h, apps: apps, log: log.Named("channels"), now: time.Now,
		onTrigger: opts.OnTrigger, idem: opts.Idempotency, history: opts.History, pushes: opts.PushIfOffline}
}

// mount binds the API's operations on g (Mount says what comes before).
func (api *ChannelsAPI) mount(g gin.IRouter) {
	onError := errorHooks(api.log)
	strict := channels.NewStrictHandlerWithOptions(api, nil, channels.StrictGinServerOptions{
		RequestErrorHandlerFunc:  requestErrorHook,
		HandlerErrorFunc:         onError,
		ResponseErrorHandlerFunc: onError,
	})
	server := channelsServer{ServerInterface: strict, api: api, onError: onError}
	channels.RegisterHandlersWithOptions(g, server, channels.GinServerOptions{
		ErrorHandler: paramErrorHook,
	})
}

// idempotencyKeys guards triggers and batches with their Idempotency-Key
// headers; it runs after authenticate.
func (api *ChannelsAPI) idempotencyKeys() gin.HandlerFunc {
	return idempotent(api.idem, api.log, idempotentRequest{
		applies: func(c *gin.Context) bool {
			p := c.FullPath()
			return c.Request.Method == http.MethodPost && (p == triggerRoute || p == batchRoute)
		},
		scope:       func(c *gin.Context) string { return appFrom(c).ID },
		body:        func(c *gin.Context) []byte { return requestBodyBytes(c.Request) },
		unavailable: clusterUnavailable,
	})
}

// The routes of the publishing operations, as gin names them.
const (
	triggerRoute = "/apps/:app_id/events"
	batchRoute   = "/apps/:app_id/batch_events"
)

// requestBodyBytes returns the body authenticate read, whole, whatever the
// handlers have read of it.
func requestBodyBytes(r *http.Request) []byte {
	if rb, ok := r.Body.(*requestBody); ok {
		return rb.bytes()
	}
	return nil
}

// channelsServer is the generated strict handler with one operation taken
// over: TriggerEvent, the API's hot path, decodes its body with
// decodeTriggerEvent instead of gin's reflective JSON binding whenever the
// body has the usual shape. Parameter binding before it and the response
// after it stay generated code.
type channelsServer struct {
	channels.ServerInterface
	api     *ChannelsAPI
	onError func(*gin.Context, error)
}

// TriggerEvent does what the generated strict handler does for the operation
// (mount installs no strict middlewares), with the fast body decoding.
func (s channelsServer) TriggerEvent(c *gin.Context, appID channels.AppID, params channels.TriggerEventParams) {
	req := channels.TriggerEventRequestObject{AppID: appID, Params: params}
	var body channels.TriggerEventRequest
	if err := bindTriggerEvent(c, &body); err == nil {
		req.Body = &body
	} else if !errors.Is(err, io.EOF) {
		requestErrorHook(c, err)
		return
	}
	res, err := s.api.TriggerEvent(c, req)
	if err != nil {
		s.onError(c, err)
		return
	}
	if res == (channels.TriggerEvent200JSONResponse{}) {
		// The usual answer (no info asked for): the bytes the generated
		// visitor writes, without encoding them anew for every request.
		err = writeEmptyTriggerResult(c.Writer)
	} else if res != nil {
		err = res.VisitTriggerEventResponse(c.Writer)
	}
	if err != nil {
		s.onError(c, err)
	}
}

// emptyTriggerResult is TriggerEvent200JSONResponse{} as the generated
// visitor encodes it; TestEmptyTriggerResultMatchesGenerated holds them equal.
var (
	emptyTriggerResult = []byte("{}\n")
	jsonContentType    = []string{"application/json"}
)

// writeEmptyTriggerResult answers 200 with emptyTriggerResult. The header is
// assigned a shared value, as gin's renderers do, where Header().Set would
// allocate a new one.
func writeEmptyTriggerResult(w http.ResponseWriter) error {
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(emptyTriggerResult)
	return err
}

// bindTriggerEvent decodes the body authenticate read with decodeTriggerEvent,
// or, for a body of another shape, exactly as the generated code does.
func bindTriggerEvent(c *gin.Context, v *channels.TriggerEventRequest) error {
	if rb, ok := c.Request.Body.(*requestBody); ok && decodeTriggerEvent(rb.unread(), v) {
		rb.skipRest()
		return nil
	}
	return c.ShouldBindJSON(v)
}

// authenticate reads the body (capped), checks the request signature and the
// app, and leaves the app on the context for the handlers. It runs before the
// generated parameter binding so that an unsigned request is refused with 401
// whatever else is wrong with it.
func (api *ChannelsAPI) authenticate(c *gin.Context) {
	r := c.Request
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		rb, err := readBody(r.Body, MaxRequestBodyBytes)
		if err != nil {
			if errors.Is(err, errBodyTooLarge) {
				writeError(c, newError(http.StatusRequestEntityTooLarge, KindBodyTooLarge, "The request body is larger than %d bytes.", MaxRequestBodyBytes))
				return
			}
			writeError(c, badRequest(KindUnreadableBody, "The request body could not be read."))
			return
		}
		// The handlers run inside c.Next below; once it returns nothing
		// holds the bytes any more.
		defer func() {
			r.Body = http.NoBody
			rb.release()
		}()
		r.Body = rb
		body = rb.bytes()
	}
	params, err := signing.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(c, badRequest(KindInvalidQuery, "The query string is malformed: %s.", err.Error()))
		return
	}
	key, ferr := params.Key()
	if ferr != nil {
		writeError(c, newError(http.StatusUnauthorized, ferr.Kind, "%s", ferr.Description))
		return
	}
	app := api.apps.ByKey(key)
	if app == nil {
		writeError(c, newError(http.StatusUnauthorized, KindUnknownAuthKey, "The auth_key is not the key of any app."))
		return
	}
	if app.ID != c.Param("app_id") {
		writeError(c, newError(http.StatusUnauthorized, KindAuthKeyAppMismatch, "The auth_key belongs to another app than the app_id in the path."))
		return
	}
	req := signing.Request{Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Body: body}
	if ferr := signing.Verify(req, params, app.Secret, api.now()); ferr != nil {
		writeError(c, newError(http.StatusUnauthorized, ferr.Kind, "%s", ferr.Description))
		return
	}
	if !app.Enabled {
		writeError(c, appDisabled)
		return
	}
	if len(body) > 0 && !isJSONContentType(r.Header.Get("Content-Type")) {
		writeError(c, badRequest(KindInvalidContentType, "A request body must be sent with Content-Type: application/json."))
		return
	}
	r.URL.RawQuery = signing.WithoutAuth(r.URL.RawQuery)
	c.Set(appContextKey, app)
	c.Next()
}

// isJSONContentType reports whether a Content-Type header names
// application/json, parameters allowed. The plain header, what SDKs send,
// is recognised without mime.ParseMediaType, which allocates a map.
func isJSONContentType(header string) bool {
	if header == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(header)
	return err == nil && mt == "application/json"
}

// appFrom returns the app that authenticate put on the context.
func appFrom(ctx context.Context) *storage.App {
	return ctx.Value(appContextKey).(*storage.App)
}

// info is a parsed `info` parameter.
type info struct {
	userCount, subscriptionCount, cache bool
}

func (i info) any() bool { return i.userCount || i.subscriptionCount || i.cache }

// parseInfo parses a comma-separated attribute list, allowing only the named
// attributes.
func parseInfo(s *string, allowed ...string) (info, error) {
	var in info
	if s == nil {
		return in, nil
	}
	for _, attr := range strings.Split(*s, ",") {
		attr = strings.TrimSpace(attr)
		if attr == "" {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || a == attr
		}
		if !ok {
			return in, badRequest(KindInvalidInfo, "info attribute %q is not available here; allowed: %s.", attr, strings.Join(allowed, ", "))
		}
		switch attr {
		case "user_count":
			in.userCount = true
		case "subscription_count":
			in.subscriptionCount = true
		case "cache":
			in.cache = true
		}
	}
	return in, nil
}

// requireSubscriptionCount refuses subscription_count for apps that did not
// enable it, as the source document says it is unavailable then.
func requireSubscriptionCount(app *storage.App, in info) error {
	if in.subscriptionCount && !app.SubscriptionCount {
		return badRequest(KindSubscriptionCountDisabled, "subscription_count is not enabled for this app.")
	}
	return nil
}

// attributes returns the requested counts of a channel that apply to its kind:
// user_count on presence channels, subscription_count on the others.
func (api *ChannelsAPI) attributes(appID, name string, in info) (channels.ChannelAttributes, error) {
	var attrs channels.ChannelAttributes
	if !in.userCount && !in.subscriptionCount {
		return attrs, nil
	}
	st, err := api.hub.State().Channel(appID, name)
	if err != nil {
		return attrs, stateError(err)
	}
	presence := hub.IsPresence(name)
	if in.userCount && presence {
		attrs.UserCount = &st.Users
	}
	if in.subscriptionCount && !presence {
		attrs.SubscriptionCount = &st.Subscriptions
	}
	return attrs, nil
}

// stateError is the answer when the hub cannot do or tell what was asked:
// in cluster mode, Redis does not answer.
func stateError(err error) error {
	if errors.Is(err, hub.ErrUnavailable) {
		return clusterUnavailable
	}
	return err
}

var clusterUnavailable = &Error{Status: http.StatusServiceUnavailable, Kind: KindClusterUnavailable,
	Description: "The cluster's Redis does not answer, so this node cannot reach the others; nothing was sent. Retry later."}

// event is one validated event to trigger.
type event struct {
	name, data, socketID string
	channels             []string
	info                 info
}

// validateEvent checks an event against the API's limits.
func validateEvent(app *storage.App, name, data *string, chans []string, socketID, infoAttr *string) (event, error) {
	var ev event
	switch {
	case name == nil || *name == "":
		return ev, badRequest(KindMissingName, "The event name is required.")
	case !hub.ValidEventName(*name):
		return ev, badRequest(KindInvalidEventName, "Event names are 1 to %d characters and may not start with pusher: or pusher_internal:.", hub.MaxEventNameLength)
	case data == nil:
		return ev, badRequest(KindMissingData, "The event data is required.")
	case len(*data) > MaxEventDataBytes:
		return ev, newError(http.StatusRequestEntityTooLarge, KindDataTooLarge, "Event data is %d bytes; the limit is %d.", len(*data), MaxEventDataBytes)
	case len(chans) == 0:
		return ev, badRequest(KindMissingChannels, "Give the channels to trigger on in channels or channel.")
	case len(chans) > MaxTriggerChannels:
		return ev, badRequest(KindTooManyChannels, "An event may name at most %d channels; this one names %d.", MaxTriggerChannels, len(chans))
	}
	seen := make(map[string]struct{}, len(chans))
	for _, ch := range chans {
		if !hub.ValidChannelName(ch) {
			return ev, badRequest(KindInvalidChannelName, "Channel name %q is invalid: use 1 to %d characters of A-Z a-z 0-9 _ - = @ , . ;", ch, hub.MaxChannelNameLength)
		}
		if _, dup := seen[ch]; !dup {
			seen[ch] = struct{}{}
			ev.channels = append(ev.channels, ch)
		}
	}
	if socketID != nil {
		if !validSocketID(*socketID) {
			return ev, badRequest(KindInvalidSocketID, "socket_id %q is not a socket identifier (two integers joined by a dot).", *socketID)
		}
		ev.socketID = *socketID
	}
	in, err := parseInfo(infoAttr, "user_count", "subscription_count")
	if err != nil {
		return ev, err
	}
	if err := requireSubscriptionCount(app, in); err != nil {
		return ev, err
	}
	ev.name, ev.data, ev.info = *name, *data, in
	return ev, nil
}

// validSocketID reports whether s looks like a socket_id: digits, a dot, digits.
func validSocketID(s string) bool {
	dot := strings.IndexByte(s, '.')
	if dot <= 0 || dot == len(s)-1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if i != dot && (s[i] < '0' || s[i] > '9') {
			return false
		}
	}
	return true
}

// publish hands the events of app to the hub, each once per channel, in
// order, and keeps them in the app's history. It is all or nothing: when
// the cluster cannot take them, none is sent and the answer is 503.
func (api *ChannelsAPI) publish(app *storage.App, evs ...event) error {
	appID := app.ID
	var buf [10]hub.Message // a batch's (at most 10) or a trigger's of up to 10 channels, without an allocation
	ms := buf[:0]
	for _, ev := range evs {
		for _, ch := range ev.channels {
			_, cache := hub.ChannelKind(ch)
			ms = append(ms, hub.Message{AppID: appID, Channel: ch, Event: ev.name, Data: ev.data, ExcludeSocketID: ev.socketID, Cache: cache})
		}
	}
	if err := api.publishKept(app, ms); err != nil {
		return stateError(err)
	}
	// One running total, read by the metrics and the console's history.
	api.hub.CountTriggered(appID, len(ms))
	for _, m := range ms {
		api.onTrigger(appID, m.Channel, m.Event, m.Data)
	}
	return nil
}

var appDisabled = &Error{Status: http.StatusForbidden, Kind: KindAppDisabled, Description: "The app is disabled."}

// Trigger publishes one event on channels of app as TriggerEvent does once
// a request is authenticated: the same limits and errors, the same fan-out
// and hooks (metrics, the console, the history). It is for callers that
// authenticate otherwise: the admin API's event creator.
func (api *ChannelsAPI) Trigger(app *storage.App, name, data string, chans []string) error {
	if !app.Enabled {
		return appDisabled
	}
	ev, err := validateEvent(app, &name, &data, chans, nil, nil)
	if err != nil {
		return err
	}
	return api.publish(app, ev)
}

// TriggerEvent implements POST /apps/{app_id}/events.
func (api *ChannelsAPI) TriggerEvent(ctx context.Context, req channels.TriggerEventRequestObject) (channels.TriggerEventResponseObject, error) {
	app := appFrom(ctx)
	// Fields may come in the query string; one given in the body wins.
	q, b := req.Params, req.Body
	if b == nil {
		b = &channels.TriggerEventRequest{}
	}
	name, data, socketID, infoAttr := pick(b.Name, q.Name), pick(b.Data, q.Data), pick(b.SocketID, q.SocketID), pick(b.Info, q.Info)
	// channels and channel come together from the body when it names either.
	list, single := q.Channels, q.Channel
	if b.Channels != nil || b.Channel != nil {
		list, single = b.Channels, b.Channel
	}
	if list != nil && single != nil {
		return nil, badRequest(KindAmbiguousChannels, "Give either channels or channel, not both.")
	}
	chans := channelList(list, single)
	ev, err := validateEvent(app, name, data, chans, socketID, infoAttr)
	if err != nil {
		return nil, err
	}
	if b.PushIfOffline != nil {
		return api.triggerOrPush(ctx, app, ev, b.PushIfOffline)
	}
	if err := api.publish(app, ev); err != nil {
		return nil, err
	}
	if !ev.info.any() {
		return channels.TriggerEvent200JSONResponse{}, nil
	}
	out := make(map[string]channels.ChannelAttributes, len(ev.channels))
	for _, ch := range ev.channels {
		if out[ch], err = api.attributes(app.ID, ch, ev.info); err != nil {
			return nil, err
		}
	}
	return channels.TriggerEvent200JSONResponse{Channels: &out}, nil
}

func pick[T any](first, second *T) *T {
	if first != nil {
		return first
	}
	return second
}

func channelList(list *[]string, single *string) []string {
	if list != nil {
		return *list
	}
	if single != nil {
		return []string{*single}
	}
	return nil
}

// TriggerBatchEvents implements POST /apps/{app_id}/batch_events. The whole
// batch is validated before any event is published, so a bad item triggers
// nothing.
func (api *ChannelsAPI) TriggerBatchEvents(ctx context.Context, req channels.TriggerBatchEventsRequestObject) (channels.TriggerBatchEventsResponseObject, error) {
	app := appFrom(ctx)
	if req.Body == nil || req.Body.Batch == nil {
		return nil, badRequest(KindMissingBatch, "The body must be {\"batch\": [events]}.")
	}
	items := req.Body.Batch
	switch {
	case len(items) == 0:
		return nil, badRequest(KindEmptyBatch, "The batch holds no events.")
	case len(items) > MaxBatchEvents:
		return nil, badRequest(KindTooManyEvents, "A batch holds at most %d events; this one holds %d.", MaxBatchEvents, len(items))
	}
	evs := make([]event, len(items))
	withInfo := false
	for i, it := range items {
		if it.PushIfOffline != nil {
			return nil, badRequest(KindInvalidPushIfOffline, "batch[%d]: push_if_offline is not taken in a batch; trigger that event on its own (POST /apps/%s/events).", i, app.ID)
		}
		ev, err := validateEvent(app, &it.Name, &it.Data, []string{it.Channel}, it.SocketID, it.Info)
		if err != nil {
			var apiErr *Error
			if errors.As(err, &apiErr) {
				apiErr.Description = "batch[" + strconv.Itoa(i) + "]: " + apiErr.Description
			}
			return nil, err
		}
		evs[i] = ev
		withInfo = withInfo || ev.info.any()
	}
	if err := api.publish(app, evs...); err != nil {
		return nil, err
	}
	if !withInfo {
		return channels.TriggerBatchEvents200JSONResponse{}, nil
	}
	out := make([]channels.ChannelAttributes, len(evs))
	for i, ev := range evs {
		var err error
		if out[i], err = api.attributes(app.ID, ev.channels[0], ev.info); err != nil {
			return nil, err
		}
	}
	return channels.TriggerBatchEvents200JSONResponse{Batch: &out}, nil
}

// ListChannels implements GET /apps/{app_id}/channels.
func (api *ChannelsAPI) ListChannels(ctx context.Context, req channels.ListChannelsRequestObject) (channels.ListChannelsResponseObject, error) {
	app := appFrom(ctx)
	prefix := ""
	if req.Params.FilterByPrefix != nil {
		prefix = *req.Params.FilterByPrefix
	}
	in, err := parseInfo(req.Params.Info, "user_count")
	if err != nil {
		return nil, err
	}
	if in.userCount && !strings.HasPrefix(prefix, "presence-") {
		return nil, badRequest(KindInvalidInfo, "user_count is only available when filter_by_prefix limits the list to presence- channels.")
	}
	list, err := api.hub.State().Channels(app.ID, prefix)
	if err != nil {
		return nil, stateError(err)
	}
	out := make(map[string]channels.ChannelAttributes, len(list))
	for _, st := range list {
		var attrs channels.ChannelAttributes
		if in.userCount {
			users := st.Users
			attrs.UserCount = &users
		}
		out[st.Name] = attrs
	}
	return channels.ListChannels200JSONResponse{Channels: out}, nil
}

// GetChannel implements GET /apps/{app_id}/channels/{channel_name}.
func (api *ChannelsAPI) GetChannel(ctx context.Context, req channels.GetChannelRequestObject) (channels.GetChannelResponseObject, error) {
	app := appFrom(ctx)
	name := req.ChannelName
	if !hub.ValidChannelName(name) {
		return nil, badRequest(KindInvalidChannelName, "Channel name %q is invalid.", name)
	}
	in, err := parseInfo(req.Params.Info, "user_count", "subscription_count", "cache")
	if err != nil {
		return nil, err
	}
	presence := hub.IsPresence(name)
	_, cache := hub.ChannelKind(name)
	switch {
	case in.userCount && !presence:
		return nil, badRequest(KindInvalidInfo, "user_count is only available on presence channels.")
	case in.subscriptionCount && presence:
		return nil, badRequest(KindInvalidInfo, "subscription_count is not available on presence channels; ask for user_count.")
	case in.cache && !cache:
		return nil, badRequest(KindInvalidInfo, "cache is only available on cache channels.")
	}
	if err := requireSubscriptionCount(app, in); err != nil {
		return nil, err
	}
	st, err := api.hub.State().Channel(app.ID, name)
	if err != nil {
		return nil, stateError(err)
	}
	out := channels.GetChannel200JSONResponse{Occupied: st.Occupied}
	if in.userCount {
		out.UserCount = &st.Users
	}
	if in.subscriptionCount {
		out.SubscriptionCount = &st.Subscriptions
	}
	if in.cache {
		data, ttl, ok, err := api.hub.State().CachedEvent(app.ID, name)
		if err != nil {
			return nil, stateError(err)
		}
		if ok {
			out.Cache = nullable.NewNullableWithValue(channels.CacheInfo{Data: data, TTL: int(ttl.Seconds())})
		} else {
			out.Cache = nullable.NewNullNullable[channels.CacheInfo]()
		}
	}
	return out, nil
}

// ListPresenceUsers implements GET /apps/{app_id}/channels/{channel_name}/users.
func (api *ChannelsAPI) ListPresenceUsers(ctx context.Context, req channels.ListPresenceUsersRequestObject) (channels.ListPresenceUsersResponseObject, error) {
	app := appFrom(ctx)
	name := req.ChannelName
	if !hub.ValidChannelName(name) {
		return nil, badRequest(KindInvalidChannelName, "Channel name %q is invalid.", name)
	}
	if !hub.IsPresence(name) {
		return nil, badRequest(KindNotPresenceChannel, "Users can only be listed on presence- channels.")
	}
	ids, err := api.hub.State().PresenceUsers(app.ID, name)
	if err != nil {
		return nil, stateError(err)
	}
	users := make([]channels.PresenceUser, len(ids))
	for i, id := range ids {
		users[i] = channels.PresenceUser{ID: id}
	}
	return channels.ListPresenceUsers200JSONResponse{Users: users}, nil
}

// TerminateUserConnections implements POST /apps/{app_id}/users/{user_id}/terminate_connections.
func (api *ChannelsAPI) TerminateUserConnections(ctx context.Context, req channels.TerminateUserConnectionsRequestObject) (channels.TerminateUserConnectionsResponseObject, error) {
	app := appFrom(ctx)
	// No body is needed; SDKs send {} and that is accepted.
	if c, ok := ctx.(*gin.Context); ok {
		body, _ := io.ReadAll(c.Request.Body)
		if len(bytes.TrimSpace(body)) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(body, &obj); err != nil {
				return nil, badRequest(KindInvalidBody, "terminate_connections takes no body; send none or {}.")
			}
		}
	}
	if req.UserID == "" {
		return nil, badRequest(KindMissingUserID, "The user id is required.")
	}
	if err := api.hub.Terminate(app.ID, req.UserID); err != nil {
		return nil, stateError(err)
	}
	return channels.TerminateUserConnections200JSONResponse{}, nil
}
