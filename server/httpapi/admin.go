package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/gen/admin"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/text"
	"github.com/heraldrt/herald/server/manage"
	"github.com/heraldrt/herald/storage"
)

// Limits of the admin API's live view (spec/admin.yaml states the same).
const (
	maxLiveChannels = 1000
	maxLiveMembers  = 100
	// MaxAdminBodyBytes caps an admin request body: a service account file
	// and a few PEM blocks fit easily.
	MaxAdminBodyBytes = 256 * 1024
)

// AdminAPI implements the admin API: apps and instances over storage, with
// the rules of package manage, and the live state of an app from the hub.
type AdminAPI struct {
	db  *storage.DB
	hub *hub.Hub
	log *zap.Logger

	console ConsoleParts // the debug console's endpoints (admin_console.go)

	// changed runs after a change to apps or instances is stored and before
	// it is answered (AdminOptions.OnChange); nil: nothing to run.
	changed func(context.Context) error
}

var _ admin.StrictServerInterface = (*AdminAPI)(nil)

// AdminOptions are the optional parts of the admin API; the zero value runs
// nothing after a change.
type AdminOptions struct {
	// OnChange runs after each change to apps or instances is stored and
	// before it is answered: the node reloads its directories there, so
	// that the node that answered acts on the change at once (refuses a
	// rotated-out secret, a disabled app), not at its next reload. Its
	// error is logged; the change is stored, and the next reload picks it
	// up. Nil: nothing runs.
	OnChange func(context.Context) error
}

// NewAdminAPI returns the admin API, with the parts of the debug console's
// endpoints (every field set) and the optional parts opts gives. Mount
// guards it with Routes.AdminToken.
func NewAdminAPI(db *storage.DB, h *hub.Hub, console ConsoleParts, log *zap.Logger, opts AdminOptions) *AdminAPI {
	return &AdminAPI{db: db, hub: h, console: console, log: log.Named("admin"), changed: opts.OnChange}
}

// stored runs AdminOptions.OnChange after a stored change.
func (api *AdminAPI) stored(ctx context.Context) {
	if api.changed == nil {
		return
	}
	if err := api.changed(ctx); err != nil {
		api.log.Warn("reloading after a change", zap.Error(err))
	}
}

// mount binds the API's operations on g (Mount says what comes before).
func (api *AdminAPI) mount(g gin.IRouter) {
	onError := errorHooks(api.log)
	strict := admin.NewStrictHandlerWithOptions(api, nil, admin.StrictGinServerOptions{
		RequestErrorHandlerFunc:  requestErrorHook,
		HandlerErrorFunc:         onError,
		ResponseErrorHandlerFunc: onError,
	})
	admin.RegisterHandlersWithOptions(g, strict, admin.GinServerOptions{ErrorHandler: paramErrorHook})
}

// RequireAdminToken refuses, with 401 and the error body, requests that do
// not carry `Authorization: Bearer <token>`. The token is never taken from
// the URL, which access logs and proxies record (the console's event stream
// uses a ticket instead). The comparison takes the same time whatever the
// token sent.
func RequireAdminToken(token string) gin.HandlerFunc {
	want := []byte(token)
	return func(c *gin.Context) {
		got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			c.Header("WWW-Authenticate", `Bearer realm="herald"`)
			writeError(c, newError(http.StatusUnauthorized, KindUnauthorized, "This needs the admin token: send Authorization: Bearer <HERALD_ADMIN_TOKEN>."))
			return
		}
		c.Next()
	}
}

// limitBody reads the request body, at most limit bytes, before the
// generated binding decodes it: a larger body is answered with 413 and one
// that cannot be read (a client that stops sending meets the server's read
// timeout) with 400, as in the other APIs, and so is a request holding the
// NUL character (refuseNUL).
func limitBody(limit int) gin.HandlerFunc {
	return func(c *gin.Context) {
		r := c.Request
		if r.Body == nil || r.Body == http.NoBody {
			if !refuseNUL(c, nil) {
				c.Next()
			}
			return
		}
		rb, err := readBody(r.Body, limit)
		if err != nil {
			writeError(c, bodyReadError(err, int64(limit)))
			return
		}
		// The handlers run inside c.Next; nothing holds the bytes after it.
		defer func() {
			r.Body = http.NoBody
			rb.release()
		}()
		if refuseNUL(c, rb.buf) {
			return
		}
		r.Body = rb
		c.Next()
	}
}

// requestCtx is the request's own context (see requestScope).
func requestCtx(ctx context.Context) context.Context {
	if c, ok := ctx.(*gin.Context); ok {
		return c.Request.Context()
	}
	return ctx
}

// resource names what an admin call works on, for its errors.
type resource struct {
	noun                      string // "app"
	notFound, exists, invalid string // its error kinds
}

var (
	appResource      = resource{"app", KindAppNotFound, KindAppExists, KindInvalidApp}
	instanceResource = resource{"instance", KindInstanceNotFound, KindInstanceExists, KindInvalidInstance}
)

// storeError maps storage and validation errors to API errors.
func storeError(r resource, id string, err error) error {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return newError(http.StatusNotFound, r.notFound, "No %s with id %q.", r.noun, text.Truncate(id, 64))
	case errors.Is(err, storage.ErrConflict):
		return newError(http.StatusConflict, r.exists, "The %s id or key is already taken.", r.noun)
	case manage.IsInvalid(err):
		return badRequest(r.invalid, "%s.", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return err
}

// appStoreError is storeError for writing app a, which may name a Push
// instance that does not exist.
func appStoreError(a storage.App, err error) error {
	if errors.Is(err, storage.ErrUnknownInstance) {
		return badRequest(appResource.invalid, "There is no Push instance %q to link the app to.", a.PushInstance)
	}
	return storeError(appResource, a.ID, err)
}

// convert copies a generated body type into another with the same JSON
// fields (AppCreate into AppOptions, say).
func convert(src, dst any) {
	b, _ := json.Marshal(src)
	_ = json.Unmarshal(b, dst)
}

// maxDurationMs is the most milliseconds a time.Duration holds (about 292
// years).
const maxDurationMs = math.MaxInt64 / int64(time.Millisecond)

// checkAppDurations refuses the durations of o that a time.Duration cannot
// hold, either way: converted, they would wrap around to any value
// (userAuthTimeoutMs 288230376151712744 was stored as 1 s). The rules of
// the values that fit are manage's, but for a negative recovery window,
// which the API has no use for (0 is off) and -1 would be storage's off.
func checkAppDurations(o admin.AppOptions) error {
	for _, d := range []struct {
		name string
		ms   *int
	}{{"userAuthTimeoutMs", o.UserAuthTimeoutMs}, {"historyTtlMs", o.HistoryTTLMs}, {"recoveryWindowMs", o.RecoveryWindowMs}} {
		if d.ms != nil && (int64(*d.ms) > maxDurationMs || int64(*d.ms) < -maxDurationMs) {
			return badRequest(KindInvalidApp, "%s is %d; a duration is at most %d milliseconds.", d.name, *d.ms, maxDurationMs)
		}
	}
	if w := o.RecoveryWindowMs; w != nil && *w < 0 {
		return badRequest(KindInvalidApp, "recoveryWindowMs is %d; it is 0 (off) or a number of milliseconds.", *w)
	}
	return nil
}

// applyApp sets the options given in o on a; checkAppDurations has passed.
func applyApp(a *storage.App, o admin.AppOptions) {
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	setBool := func(dst *bool, v *bool) {
		if v != nil {
			*dst = *v
		}
	}
	setInt := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	set(&a.Key, o.Key)
	set(&a.Secret, o.Secret)
	setBool(&a.Enabled, o.Enabled)
	setBool(&a.ClientEvents, o.ClientEvents)
	setBool(&a.SubscriptionCount, o.SubscriptionCount)
	setInt(&a.MaxConnections, o.MaxConnections)
	setInt(&a.MaxPresenceMembers, o.MaxPresenceMembers)
	setInt(&a.MaxPresenceUserInfoBytes, o.MaxPresenceUserInfoBytes)
	setInt(&a.HistoryEvents, o.HistoryEvents)
	if o.HistoryTTLMs != nil {
		a.HistoryTTL = time.Duration(*o.HistoryTTLMs) * time.Millisecond
	}
	if o.RecoveryWindowMs != nil {
		a.RecoveryWindow = time.Duration(*o.RecoveryWindowMs) * time.Millisecond
		if a.RecoveryWindow == 0 {
			a.RecoveryWindow = storage.RecoveryOff
		}
	}
	set(&a.PushInstance, o.PushInstance)
	if o.UserAuthTimeoutMs != nil {
		a.UserAuthTimeout = time.Duration(*o.UserAuthTimeoutMs) * time.Millisecond
	}
	if o.Webhooks != nil {
		a.Webhooks = make([]storage.Webhook, 0, len(*o.Webhooks))
		for _, w := range *o.Webhooks {
			sw := storage.Webhook{URL: w.URL}
			if w.ChannelPrefix != nil {
				sw.ChannelPrefix = *w.ChannelPrefix
			}
			if w.Batch != nil {
				sw.Batch = *w.Batch
			}
			if w.EventTypes != nil {
				for _, k := range *w.EventTypes {
					sw.EventTypes = append(sw.EventTypes, string(k))
				}
			}
			a.Webhooks = append(a.Webhooks, sw)
		}
	}
}

func appOut(a storage.App) admin.App {
	hooks := make([]admin.Webhook, 0, len(a.Webhooks))
	for _, w := range a.Webhooks {
		kinds := make([]admin.WebhookKind, 0, len(w.EventTypes))
		for _, k := range w.EventTypes {
			kinds = append(kinds, admin.WebhookKind(k))
		}
		prefix, batch := w.ChannelPrefix, w.Batch
		hooks = append(hooks, admin.Webhook{URL: w.URL, EventTypes: &kinds, ChannelPrefix: &prefix, Batch: &batch})
	}
	var pushInstance *string
	if a.PushInstance != "" {
		pushInstance = &a.PushInstance
	}
	recoveryWindow := a.RecoveryWindow
	if recoveryWindow == storage.RecoveryOff {
		recoveryWindow = 0
	}
	return admin.App{
		PushInstance: pushInstance, ID: a.ID, Key: a.Key, Secret: a.Secret, Enabled: a.Enabled, ClientEvents: a.ClientEvents,
		SubscriptionCount: a.SubscriptionCount, UserAuthTimeoutMs: int(a.UserAuthTimeout.Milliseconds()),
		MaxConnections: a.MaxConnections, MaxPresenceMembers: a.MaxPresenceMembers,
		MaxPresenceUserInfoBytes: a.MaxPresenceUserInfoBytes, HistoryEvents: a.HistoryEvents,
		HistoryTTLMs: int(a.HistoryTTL.Milliseconds()), RecoveryWindowMs: int(recoveryWindow.Milliseconds()), Webhooks: hooks,
		CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt,
	}
}

// ListApps implements GET /admin/v1/apps.
func (api *AdminAPI) ListApps(ctx context.Context, _ admin.ListAppsRequestObject) (admin.ListAppsResponseObject, error) {
	apps, err := api.db.ListApps(requestCtx(ctx))
	if err != nil {
		return nil, err
	}
	out := admin.ListApps200JSONResponse{Apps: make([]admin.App, 0, len(apps))}
	for _, a := range apps {
		out.Apps = append(out.Apps, appOut(a))
	}
	return out, nil
}

// CreateApp implements POST /admin/v1/apps.
func (api *AdminAPI) CreateApp(ctx context.Context, req admin.CreateAppRequestObject) (admin.CreateAppResponseObject, error) {
	a := manage.NewApp()
	if req.Body.ID != nil {
		a.ID = *req.Body.ID
	}
	var opts admin.AppOptions
	convert(req.Body, &opts)
	if err := checkAppDurations(opts); err != nil {
		return nil, err
	}
	applyApp(&a, opts)
	if err := manage.ValidateApp(a); err != nil {
		return nil, storeError(appResource, a.ID, err)
	}
	created, err := api.db.CreateApp(requestCtx(ctx), a)
	if err != nil {
		return nil, appStoreError(a, err)
	}
	api.stored(requestCtx(ctx))
	return admin.CreateApp201JSONResponse(appOut(created)), nil
}

// GetApp implements GET /admin/v1/apps/{app_id}.
func (api *AdminAPI) GetApp(ctx context.Context, req admin.GetAppRequestObject) (admin.GetAppResponseObject, error) {
	a, err := api.db.GetApp(requestCtx(ctx), req.AppID)
	if err != nil {
		return nil, storeError(appResource, req.AppID, err)
	}
	return admin.GetApp200JSONResponse(appOut(a)), nil
}

// changeApp reads an app, applies change, validates and stores it.
func (api *AdminAPI) changeApp(ctx context.Context, id string, change func(*storage.App)) (admin.App, error) {
	ctx = requestCtx(ctx)
	a, err := api.db.GetApp(ctx, id)
	if err != nil {
		return admin.App{}, storeError(appResource, id, err)
	}
	change(&a)
	if err := manage.ValidateApp(a); err != nil {
		return admin.App{}, storeError(appResource, id, err)
	}
	if err := api.db.UpdateApp(ctx, a); err != nil {
		return admin.App{}, appStoreError(a, err)
	}
	api.stored(ctx)
	// Read back: defaults and webhook ids are filled in by storage.
	if a, err = api.db.GetApp(ctx, id); err != nil {
		return admin.App{}, storeError(appResource, id, err)
	}
	return appOut(a), nil
}

// UpdateApp implements PATCH /admin/v1/apps/{app_id}.
func (api *AdminAPI) UpdateApp(ctx context.Context, req admin.UpdateAppRequestObject) (admin.UpdateAppResponseObject, error) {
	if err := checkAppDurations(*req.Body); err != nil {
		return nil, err
	}
	a, err := api.changeApp(ctx, req.AppID, func(a *storage.App) { applyApp(a, *req.Body) })
	if err != nil {
		return nil, err
	}
	return admin.UpdateApp200JSONResponse(a), nil
}

// DeleteApp implements DELETE /admin/v1/apps/{app_id}.
func (api *AdminAPI) DeleteApp(ctx context.Context, req admin.DeleteAppRequestObject) (admin.DeleteAppResponseObject, error) {
	if err := api.db.DeleteApp(requestCtx(ctx), req.AppID); err != nil {
		return nil, storeError(appResource, req.AppID, err)
	}
	api.stored(requestCtx(ctx))
	return admin.DeleteApp200JSONResponse{}, nil
}

// RotateAppSecret implements POST /admin/v1/apps/{app_id}/rotate-secret.
func (api *AdminAPI) RotateAppSecret(ctx context.Context, req admin.RotateAppSecretRequestObject) (admin.RotateAppSecretResponseObject, error) {
	a, err := api.changeApp(ctx, req.AppID, manage.RotateAppSecret)
	if err != nil {
		return nil, err
	}
	return admin.RotateAppSecret200JSONResponse(a), nil
}

// DisableApp implements POST /admin/v1/apps/{app_id}/disable.
func (api *AdminAPI) DisableApp(ctx context.Context, req admin.DisableAppRequestObject) (admin.DisableAppResponseObject, error) {
	a, err := api.changeApp(ctx, req.AppID, func(a *storage.App) { a.Enabled = false })
	if err != nil {
		return nil, err
	}
	return admin.DisableApp200JSONResponse(a), nil
}

// EnableApp implements POST /admin/v1/apps/{app_id}/enable.
func (api *AdminAPI) EnableApp(ctx context.Context, req admin.EnableAppRequestObject) (admin.EnableAppResponseObject, error) {
	a, err := api.changeApp(ctx, req.AppID, func(a *storage.App) { a.Enabled = true })
	if err != nil {
		return nil, err
	}
	return admin.EnableApp200JSONResponse(a), nil
}

// GetAppLive implements GET /admin/v1/apps/{app_id}/live.
func (api *AdminAPI) GetAppLive(ctx context.Context, req admin.GetAppLiveRequestObject) (admin.GetAppLiveResponseObject, error) {
	if _, err := api.db.GetApp(requestCtx(ctx), req.AppID); err != nil {
		return nil, storeError(appResource, req.AppID, err)
	}
	state := api.hub.State()
	chans, err := state.Channels(req.AppID, "")
	if err != nil {
		return nil, stateError(err)
	}
	if len(chans) > maxLiveChannels {
		chans = chans[:maxLiveChannels]
	}
	conns, err := state.Connections(req.AppID)
	if err != nil {
		return nil, stateError(err)
	}
	out := admin.GetAppLive200JSONResponse{AppID: req.AppID, Connections: conns, Channels: make([]admin.LiveChannel, 0, len(chans))}
	for _, ch := range chans {
		lc := admin.LiveChannel{Name: ch.Name, Subscriptions: ch.Subscriptions}
		if hub.IsPresence(ch.Name) {
			users := ch.Users
			members, err := state.PresenceUsers(req.AppID, ch.Name)
			if err != nil {
				return nil, stateError(err)
			}
			if len(members) > maxLiveMembers {
				members = members[:maxLiveMembers]
			}
			lc.Users, lc.Members = &users, &members
		}
		out.Channels = append(out.Channels, lc)
	}
	return out, nil
}

// applyInstance sets the options given in o on in.
func applyInstance(in *storage.Instance, o admin.InstanceOptions) {
	for _, f := range []struct {
		dst *string
		v   *string
	}{
		{&in.SecretKey, o.SecretKey}, {&in.JWTIssuer, o.JwtIssuer}, {&in.APNs.KeyPEM, o.ApnsKeyPem},
		{&in.APNs.KeyID, o.ApnsKeyID}, {&in.APNs.TeamID, o.ApnsTeamID}, {&in.APNs.Topic, o.ApnsTopic},
		{&in.APNs.URL, o.ApnsURL}, {&in.APNs.CAPEM, o.ApnsCaPem}, {&in.FCM.ServiceAccountJSON, o.FcmServiceAccountJSON},
		{&in.FCM.URL, o.FcmURL}, {&in.VAPID.Subject, o.VapidSubject},
	} {
		if f.v != nil {
			*f.dst = *f.v
		}
	}
	if o.Enabled != nil {
		in.Enabled = *o.Enabled
	}
	if o.PublishQuota != nil {
		in.PublishQuota = *o.PublishQuota
	}
}

func (api *AdminAPI) instanceOut(ctx context.Context, in storage.Instance) (admin.Instance, error) {
	devices, err := api.db.CountDevices(ctx, in.ID)
	if err != nil {
		return admin.Instance{}, err
	}
	out := admin.Instance{
		ID: in.ID, SecretKey: in.SecretKey, Enabled: in.Enabled, JwtIssuer: in.JWTIssuer,
		PublishQuota: in.PublishQuota, Devices: devices, CreatedAt: in.CreatedAt, UpdatedAt: in.UpdatedAt,
	}
	out.Apns.KeyConfigured, out.Apns.KeyID, out.Apns.TeamID = in.APNs.KeyPEM != "", in.APNs.KeyID, in.APNs.TeamID
	out.Apns.Topic, out.Apns.URL, out.Apns.CaConfigured = in.APNs.Topic, in.APNs.URL, in.APNs.CAPEM != ""
	out.Fcm.ServiceAccountConfigured, out.Fcm.URL = in.FCM.ServiceAccountJSON != "", in.FCM.URL
	out.Vapid.PublicKey, out.Vapid.Subject = in.VAPID.PublicKey, in.VAPID.Subject
	return out, nil
}

// ListInstances implements GET /admin/v1/instances.
func (api *AdminAPI) ListInstances(ctx context.Context, _ admin.ListInstancesRequestObject) (admin.ListInstancesResponseObject, error) {
	ctx = requestCtx(ctx)
	list, err := api.db.ListInstances(ctx)
	if err != nil {
		return nil, err
	}
	out := admin.ListInstances200JSONResponse{Instances: make([]admin.Instance, 0, len(list))}
	for _, in := range list {
		o, err := api.instanceOut(ctx, in)
		if err != nil {
			return nil, err
		}
		out.Instances = append(out.Instances, o)
	}
	return out, nil
}

// CreateInstance implements POST /admin/v1/instances.
func (api *AdminAPI) CreateInstance(ctx context.Context, req admin.CreateInstanceRequestObject) (admin.CreateInstanceResponseObject, error) {
	ctx = requestCtx(ctx)
	in, err := manage.NewInstance()
	if err != nil {
		return nil, err
	}
	if req.Body.ID != nil {
		in.ID = *req.Body.ID
	}
	var opts admin.InstanceOptions
	convert(req.Body, &opts)
	applyInstance(&in, opts)
	if err := manage.ValidateInstance(in); err != nil {
		return nil, storeError(instanceResource, in.ID, err)
	}
	created, err := api.db.CreateInstance(ctx, in)
	if err != nil {
		return nil, storeError(instanceResource, in.ID, err)
	}
	api.stored(ctx)
	out, err := api.instanceOut(ctx, created)
	if err != nil {
		return nil, err
	}
	return admin.CreateInstance201JSONResponse(out), nil
}

// GetInstance implements GET /admin/v1/instances/{instance_id}.
func (api *AdminAPI) GetInstance(ctx context.Context, req admin.GetInstanceRequestObject) (admin.GetInstanceResponseObject, error) {
	ctx = requestCtx(ctx)
	in, err := api.db.GetInstance(ctx, req.InstanceID)
	if err != nil {
		return nil, storeError(instanceResource, req.InstanceID, err)
	}
	out, err := api.instanceOut(ctx, in)
	if err != nil {
		return nil, err
	}
	return admin.GetInstance200JSONResponse(out), nil
}

// changeInstance reads an instance, applies change, validates and stores it.
func (api *AdminAPI) changeInstance(ctx context.Context, id string, change func(*storage.Instance) error) (admin.Instance, error) {
	ctx = requestCtx(ctx)
	in, err := api.db.GetInstance(ctx, id)
	if err != nil {
		return admin.Instance{}, storeError(instanceResource, id, err)
	}
	if err := change(&in); err != nil {
		return admin.Instance{}, err
	}
	if err := manage.ValidateInstance(in); err != nil {
		return admin.Instance{}, storeError(instanceResource, id, err)
	}
	if err := api.db.UpdateInstance(ctx, in); err != nil {
		return admin.Instance{}, storeError(instanceResource, id, err)
	}
	api.stored(ctx)
	if in, err = api.db.GetInstance(ctx, id); err != nil {
		return admin.Instance{}, storeError(instanceResource, id, err)
	}
	return api.instanceOut(ctx, in)
}

// UpdateInstance implements PATCH /admin/v1/instances/{instance_id}.
func (api *AdminAPI) UpdateInstance(ctx context.Context, req admin.UpdateInstanceRequestObject) (admin.UpdateInstanceResponseObject, error) {
	out, err := api.changeInstance(ctx, req.InstanceID, func(in *storage.Instance) error { applyInstance(in, *req.Body); return nil })
	if err != nil {
		return nil, err
	}
	return admin.UpdateInstance200JSONResponse(out), nil
}

// DeleteInstance implements DELETE /admin/v1/instances/{instance_id}.
func (api *AdminAPI) DeleteInstance(ctx context.Context, req admin.DeleteInstanceRequestObject) (admin.DeleteInstanceResponseObject, error) {
	if err := api.db.DeleteInstance(requestCtx(ctx), req.InstanceID); err != nil {
		return nil, storeError(instanceResource, req.InstanceID, err)
	}
	api.stored(requestCtx(ctx))
	return admin.DeleteInstance200JSONResponse{}, nil
}

// RotateInstanceSecret implements POST /admin/v1/instances/{instance_id}/rotate-secret.
func (api *AdminAPI) RotateInstanceSecret(ctx context.Context, req admin.RotateInstanceSecretRequestObject) (admin.RotateInstanceSecretResponseObject, error) {
	out, err := api.changeInstance(ctx, req.InstanceID, manage.RotateInstanceSecret)
	if err != nil {
		return nil, err
	}
	return admin.RotateInstanceSecret200JSONResponse(out), nil
}

// DisableInstance implements POST /admin/v1/instances/{instance_id}/disable.
func (api *AdminAPI) DisableInstance(ctx context.Context, req admin.DisableInstanceRequestObject) (admin.DisableInstanceResponseObject, error) {
	out, err := api.changeInstance(ctx, req.InstanceID, func(in *storage.Instance) error { in.Enabled = false; return nil })
	if err != nil {
		return nil, err
	}
	return admin.DisableInstance200JSONResponse(out), nil
}

// EnableInstance implements POST /admin/v1/instances/{instance_id}/enable.
func (api *AdminAPI) EnableInstance(ctx context.Context, req admin.EnableInstanceRequestObject) (admin.EnableInstanceResponseObject, error) {
	out, err := api.changeInstance(ctx, req.InstanceID, func(in *storage.Instance) error { in.Enabled = true; return nil })
	if err != nil {
		return nil, err
	}
	return admin.EnableInstance200JSONResponse(out), nil
}

// AbortWithError answers with the one error body, for handlers mounted on the
// engine from other packages (the console).
func AbortWithError(c *gin.Context, status int, kind, description string) {
	writeError(c, &Error{Status: status, Kind: kind, Description: description})
}
