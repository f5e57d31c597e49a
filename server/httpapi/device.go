package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/gen/device"
	"github.com/heraldrt/herald/server/beamsauth"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/text"
	"github.com/heraldrt/herald/server/manage"
	"github.com/heraldrt/herald/server/netguard"
	"github.com/heraldrt/herald/server/push"
	"github.com/heraldrt/herald/storage"
)

// Limits of the Device API (spec/device.yaml states the same).
const (
	// MaxDeviceBodyBytes caps a Device API request body: 5000 interests of
	// 164 characters, quoted and comma-separated, fit with room to spare.
	MaxDeviceBodyBytes = 1 << 20
	// MaxInterestNameLength is the longest interest name, in characters.
	MaxInterestNameLength = 164
	// MaxInterestPage is the default and largest page of the interest listing.
	MaxInterestPage = 100
	// maxDeviceIDLength bounds device ids in paths; ours are 41 characters.
	maxDeviceIDLength = 64
	// maxTokenLength bounds gateway tokens (a web token holds a whole
	// PushSubscription, base64-encoded).
	maxTokenLength = 8192
	// maxMetadataLength bounds each metadata value and the bundle identifier.
	maxMetadataLength    = 100
	maxBundleIDLength    = 255
	maxKnownPreviousIDs  = 100
	instanceContextKey   = "herald.push.instance"
	interestCursorPrefix = "i1."
)

// InstanceLookup finds Push instances by id.
type InstanceLookup interface {
	ByID(id string) *storage.Instance
}

// DeviceAPI implements the Push Device API over storage.
type DeviceAPI struct {
	db        *storage.DB
	instances InstanceLookup
	log       *zap.Logger
	verifier  func(*storage.Instance) beamsauth.Verifier
	anon      *AnonLimiter // requests per client address (DeviceOptions.LimitPerClient); nil: no limit
	// webPush says where web device endpoints may lead
	// (DeviceOptions.WebPushAllowedHosts).
	webPush *netguard.Policy
}

var _ device.StrictServerInterface = (*DeviceAPI)(nil)

// DeviceOptions are the optional parts of the Device API; the zero value
// limits no client and takes only Web Push endpoints that are https to
// hosts that are not literal internal addresses.
type DeviceOptions struct {
	// LimitPerClient takes each request from the limiter's budget for its
	// client address; nil: no limit.
	LimitPerClient *AnonLimiter
	// WebPushAllowedHosts lets web devices register endpoints on these
	// hosts (names or IP addresses, each optionally with ":port";
	// HERALD_WEBPUSH_ALLOWED_HOSTS) that are private or plain http.
	WebPushAllowedHosts []string
}

// NewDeviceAPI returns the Device API handler, with the optional parts opts
// gives.
func NewDeviceAPI(db *storage.DB, instances InstanceLookup, log *zap.Logger, opts DeviceOptions) *DeviceAPI {
	return &DeviceAPI{db: db, instances: instances, log: log.Named("device"), verifier: func(in *storage.Instance) beamsauth.Verifier {
		return beamsauth.Verifier{InstanceID: in.ID, SecretKey: in.SecretKey, ExtraIssuer: in.JWTIssuer}
	}, anon: opts.LimitPerClient, webPush: netguard.NewPolicy(opts.WebPushAllowedHosts)}
}

// mount binds the API's operations on g (Mount says what comes before).
func (api *DeviceAPI) mount(g gin.IRouter) {
	onError := errorHooks(api.log)
	strict := device.NewStrictHandlerWithOptions(api, nil, device.StrictGinServerOptions{
		RequestErrorHandlerFunc:  requestErrorHook,
		HandlerErrorFunc:         onError,
		ResponseErrorHandlerFunc: onError,
	})
	device.RegisterHandlersWithOptions(g, strict, device.GinServerOptions{ErrorHandler: paramErrorHook})
}

// cors lets browsers call the API from any origin: the Web SDK runs on the
// customer's site and calls Herald cross-origin. No cookies are involved, so
// the wildcard origin is safe.
func cors(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept, X-Requested-With")
	h.Set("Access-Control-Max-Age", "86400")
	c.Next()
}

// registerPreflights adds an OPTIONS route for every path of the API's
// embedded spec, so preflights reach exactly the paths that exist and an
// unknown path still gets 404 rather than 405.
func registerPreflights(r gin.IRouter, load func() (*openapi3.T, error)) {
	doc, err := load()
	if err != nil {
		// The spec is embedded at build time; failing to parse it is a build defect.
		panic(fmt.Sprintf("httpapi: embedded spec: %v", err))
	}
	for _, path := range doc.Paths.InMatchingOrder() {
		r.OPTIONS(specPathParams.ReplaceAllString(path, ":$1"), corsPreflight)
	}
}

// specPathParams matches the {name} path parameters of an OpenAPI path.
var specPathParams = regexp.MustCompile(`\{([^}]+)\}`)

// corsPreflight answers an OPTIONS request with the CORS headers and nothing
// else: preflights carry no credentials and no body, so nothing is checked.
func corsPreflight(c *gin.Context) {
	cors(c)
	c.AbortWithStatus(http.StatusNoContent)
}

// pushInstance checks the path's instance_id and leaves the instance on the
// context: 400 when it is not a UUID, 404 when there is no such (enabled)
// instance.
func pushInstance(instances InstanceLookup) gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.Param("instance_id")
		switch {
		case id == "":
			writeError(c, badRequest(KindMissingInstanceID, "The instance id is missing from the path."))
			return
		case !manage.ValidInstanceID(id):
			writeError(c, badRequest(KindInvalidInstanceID, "The instance id %q is not a UUID.", text.Truncate(id, 64)))
			return
		}
		in := instances.ByID(id)
		if in == nil || !in.Enabled {
			writeError(c, newError(http.StatusNotFound, KindInstanceNotFound, "There is no instance %s.", id))
			return
		}
		c.Set(instanceContextKey, in)
		c.Next()
	}
}

// requestScope returns the instance pushInstance put on the context and the
// request's own context. Storage calls must get the latter: database/sql and
// the SQLite driver watch a context from goroutines that can outlive the
// handler, and gin reuses a *gin.Context for the next request.
func requestScope(ctx context.Context) (*storage.Instance, context.Context) {
	in := ctx.Value(instanceContextKey).(*storage.Instance)
	if c, ok := ctx.(*gin.Context); ok {
		return in, c.Request.Context()
	}
	return in, ctx
}

// jsonBody reads a request body of at most limit bytes and, when it is not
// empty, requires Content-Type: application/json. Requests without a body
// (GET, DELETE, add interest, set user) need no content type: the Web and
// Android SDKs send none. A request holding the NUL character, or JSON
// the databases do not both store, is refused (refuseUnstorable).
func jsonBody(limit int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		r := c.Request
		if r.Body == nil || r.Body == http.NoBody {
			if !refuseNUL(c, nil) {
				c.Next()
			}
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(c.Writer, r.Body, limit))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				writeError(c, newError(http.StatusRequestEntityTooLarge, KindBodyTooLarge, "The request body is larger than %d bytes.", limit))
				return
			}
			writeError(c, badRequest(KindUnreadableBody, "The request body could not be read."))
			return
		}
		if len(body) > 0 {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				writeError(c, badRequest(KindInvalidContentType, "A request body must be sent with Content-Type: application/json."))
				return
			}
		}
		if refuseUnstorable(c, body) {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		c.Next()
	}
}

// ValidInterestName reports whether s is 1 to 164 characters of
// A-Z a-z 0-9 _ - = @ , . ;
func ValidInterestName(s string) bool {
	return s != "" && len(s) <= MaxInterestNameLength && hub.NameChars(s)
}

func invalidInterest(name string) *Error {
	return badRequest(KindInvalidInterestName, "Interest name %q is invalid: use 1 to %d characters of A-Z a-z 0-9 _ - = @ , . ;", text.Truncate(name, 200), MaxInterestNameLength)
}

// deviceRef checks a path's platform and device id.
func deviceRef(platform device.Platform, id string) (storage.Platform, error) {
	p := storage.Platform(platform)
	if !p.Valid() {
		return "", badRequest(KindInvalidPlatform, "Platform %q is not one of apns, fcm, web.", text.Truncate(string(platform), 64))
	}
	if id == "" {
		return "", badRequest(KindMissingDeviceID, "The device id is missing from the path.")
	}
	if len(id) > maxDeviceIDLength {
		return "", badRequest(KindInvalidDeviceID, "Device ids are at most %d characters.", maxDeviceIDLength)
	}
	return p, nil
}

// deviceError maps storage errors of a device operation to API errors.
func deviceError(err error, id string) error {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return newError(http.StatusNotFound, KindDeviceNotFound, "There is no device %s on this platform.", text.Truncate(id, maxDeviceIDLength))
	case errors.Is(err, storage.ErrInterestLimit):
		return badRequest(KindTooManyInterests, "A device holds at most %d interests.", storage.MaxDeviceInterests)
	case errors.Is(err, storage.ErrUserAlreadySet):
		return badRequest(KindUserAlreadySet, "A user is already associated with this device.")
	case errors.Is(err, storage.ErrUserDeviceLimit):
		return newError(http.StatusUnprocessableEntity, KindTooManyDevices, "The user already has the maximum of %d devices.", storage.MaxUserDevices)
	}
	return err
}

// metadataMap turns metadata fields into the stored map, checking lengths.
func metadataMap(fields map[string]*string) (map[string]string, error) {
	md := map[string]string{}
	for k, v := range fields {
		if v == nil {
			continue
		}
		if utf8.RuneCountInString(*v) > maxMetadataLength {
			return nil, badRequest(KindInvalidMetadata, "metadata.%s is longer than %d characters.", k, maxMetadataLength)
		}
		md[k] = *v
	}
	return md, nil
}

func apiMetadata(md map[string]string) *device.Metadata {
	get := func(k string) *string {
		if v, ok := md[k]; ok {
			return &v
		}
		return nil
	}
	return &device.Metadata{SdkVersion: get("sdkVersion"), IosVersion: get("iosVersion"), MacosVersion: get("macosVersion"), AndroidVersion: get("androidVersion")}
}

func genericMetadata(m *device.Metadata) map[string]*string {
	if m == nil {
		return nil
	}
	return map[string]*string{"sdkVersion": m.SdkVersion, "iosVersion": m.IosVersion, "macosVersion": m.MacosVersion, "androidVersion": m.AndroidVersion}
}

// checkToken validates a gateway token's shape for its platform. The
// gateway has the last word; this catches what can never be a token.
func checkToken(p storage.Platform, token string) error {
	switch {
	case token == "":
		return badRequest(KindMissingToken, "The gateway token is required.")
	case len(token) > maxTokenLength:
		return badRequest(KindInvalidToken, "The gateway token is longer than %d bytes.", maxTokenLength)
	}
	switch p {
	case storage.PlatformAPNs:
		// The iOS SDK sends the device token's bytes in hex.
		if len(token)%2 != 0 || strings.TrimLeft(token, "0123456789abcdefABCDEF") != "" {
			return newError(http.StatusUnauthorized, KindInvalidGatewayToken, "An APNs device token is the hex encoding of the token bytes.")
		}
	case storage.PlatformFCM:
		for i := 0; i < len(token); i++ {
			if token[i] <= ' ' || token[i] >= 0x7f {
				return newError(http.StatusUnauthorized, KindInvalidGatewayToken, "An FCM registration token is printable ASCII without spaces.")
			}
		}
	case storage.PlatformWeb:
		return checkWebToken(token)
	}
	return nil
}

// checkWebToken checks that token is the base64 of a PushSubscription JSON
// with an http(s) endpoint and both keys, which Web Push delivery needs.
func checkWebToken(token string) error {
	invalid := badRequest(KindInvalidToken, "A web token is the base64 of the browser's PushSubscription JSON, with endpoint, keys.p256dh and keys.auth.")
	raw, err := base64.StdEncoding.DecodeString(token)
	if err != nil {
		if raw, err = base64.RawStdEncoding.DecodeString(token); err != nil {
			return invalid
		}
	}
	var sub struct {
		Endpoint string `json:"endpoint"`
		Keys     struct {
			P256dh string `json:"p256dh"`
			Auth   string `json:"auth"`
		} `json:"keys"`
	}
	if json.Unmarshal(raw, &sub) != nil || sub.Keys.P256dh == "" || sub.Keys.Auth == "" {
		return invalid
	}
	u, err := url.Parse(sub.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return invalid
	}
	return nil
}

// register stores a validated registration.
func (api *DeviceAPI) register(ctx context.Context, d storage.Device, known *[]string) (device.RegisteredJSONResponse, error) {
	if known != nil && len(*known) > maxKnownPreviousIDs {
		return device.RegisteredJSONResponse{}, badRequest(KindInvalidKnownPreviousClientIds, "knownPreviousClientIds holds at most %d ids.", maxKnownPreviousIDs)
	}
	in, ctx := requestScope(ctx)
	d.InstanceID = in.ID
	stored, interests, err := api.db.RegisterDevice(ctx, d)
	if err != nil {
		return device.RegisteredJSONResponse{}, err
	}
	return device.RegisteredJSONResponse{ID: stored.ID, InitialInterestSet: interests}, nil
}

// RegisterApnsDevice implements POST …/devices/apns.
func (api *DeviceAPI) RegisterApnsDevice(ctx context.Context, req device.RegisterApnsDeviceRequestObject) (device.RegisterApnsDeviceResponseObject, error) {
	b := req.Body
	if err := checkToken(storage.PlatformAPNs, b.Token); err != nil {
		return nil, err
	}
	if b.BundleIdentifier == "" {
		return nil, badRequest(KindMissingBundleIdentifier, "The bundleIdentifier is required for APNs devices.")
	}
	if len(b.BundleIdentifier) > maxBundleIDLength {
		return nil, badRequest(KindInvalidBundleIdentifier, "The bundleIdentifier is longer than %d bytes.", maxBundleIDLength)
	}
	var fields map[string]*string
	if m := b.Metadata; m != nil {
		fields = map[string]*string{"sdkVersion": m.SdkVersion, "iosVersion": m.IosVersion, "macosVersion": m.MacosVersion}
	}
	md, err := metadataMap(fields)
	if err != nil {
		return nil, err
	}
	res, err := api.register(ctx, storage.Device{Platform: storage.PlatformAPNs, Token: b.Token, BundleIdentifier: b.BundleIdentifier, Metadata: md}, b.KnownPreviousClientIds)
	if err != nil {
		return nil, err
	}
	return device.RegisterApnsDevice200JSONResponse{RegisteredJSONResponse: res}, nil
}

// RegisterFcmDevice implements POST …/devices/fcm.
func (api *DeviceAPI) RegisterFcmDevice(ctx context.Context, req device.RegisterFcmDeviceRequestObject) (device.RegisterFcmDeviceResponseObject, error) {
	b := req.Body
	if err := checkToken(storage.PlatformFCM, b.Token); err != nil {
		return nil, err
	}
	bundle := ""
	if b.BundleIdentifier != nil {
		bundle = *b.BundleIdentifier
	}
	if len(bundle) > maxBundleIDLength {
		return nil, badRequest(KindInvalidBundleIdentifier, "The bundleIdentifier is longer than %d bytes.", maxBundleIDLength)
	}
	var fields map[string]*string
	if m := b.Metadata; m != nil {
		fields = map[string]*string{"sdkVersion": m.SdkVersion, "androidVersion": m.AndroidVersion}
	}
	md, err := metadataMap(fields)
	if err != nil {
		return nil, err
	}
	res, err := api.register(ctx, storage.Device{Platform: storage.PlatformFCM, Token: b.Token, BundleIdentifier: bundle, Metadata: md}, b.KnownPreviousClientIds)
	if err != nil {
		return nil, err
	}
	return device.RegisterFcmDevice200JSONResponse{RegisteredJSONResponse: res}, nil
}

// checkWebEndpoint refuses, with 400, a web token (already checked by
// checkToken) whose endpoint the Web Push guard refuses by the URL alone:
// plain http, a literal internal address, a localhost name. Host names are
// not resolved here (DNS can change before a publish); delivery judges the
// address they resolve to, and a refused one is a failed delivery.
func (api *DeviceAPI) checkWebEndpoint(token string) error {
	sub, err := push.DecodeWebToken(token)
	if err != nil {
		return badRequest(KindInvalidToken, "A web token is the base64 of the browser's PushSubscription JSON, with endpoint, keys.p256dh and keys.auth.")
	}
	var refused *netguard.RefusedError
	if err := api.webPush.CheckURL(sub.Endpoint); errors.As(err, &refused) {
		return badRequest(KindEndpointNotAllowed, "The web token's endpoint host %q is not allowed (%s): Web Push endpoints must be https URLs of a public push service.",
			text.Truncate(refused.Target, 100), refused.Reason)
	} else if err != nil {
		return badRequest(KindInvalidToken, "The web token's endpoint is not an http(s) URL.")
	}
	return nil
}

// RegisterWebDevice implements POST …/devices/web.
func (api *DeviceAPI) RegisterWebDevice(ctx context.Context, req device.RegisterWebDeviceRequestObject) (device.RegisterWebDeviceResponseObject, error) {
	b := req.Body
	if err := checkToken(storage.PlatformWeb, b.Token); err != nil {
		return nil, err
	}
	if err := api.checkWebEndpoint(b.Token); err != nil {
		return nil, err
	}
	md, err := metadataMap(genericMetadata(b.Metadata))
	if err != nil {
		return nil, err
	}
	res, err := api.register(ctx, storage.Device{Platform: storage.PlatformWeb, Token: b.Token, Metadata: md}, nil)
	if err != nil {
		return nil, err
	}
	return device.RegisterWebDevice200JSONResponse{RegisteredJSONResponse: res}, nil
}

// GetDevice implements GET …/devices/{platform}/{device_id}.
func (api *DeviceAPI) GetDevice(ctx context.Context, req device.GetDeviceRequestObject) (device.GetDeviceResponseObject, error) {
	in, ctx := requestScope(ctx)
	p, err := deviceRef(req.Platform, req.DeviceID)
	if err != nil {
		return nil, err
	}
	d, err := api.db.GetDevice(ctx, in.ID, p, req.DeviceID)
	if err != nil {
		return nil, deviceError(err, req.DeviceID)
	}
	return device.GetDevice200JSONResponse{ID: d.ID, UserID: d.UserID, Metadata: apiMetadata(d.Metadata)}, nil
}

// DeleteDevice implements DELETE …/devices/{platform}/{device_id}. Deleting
// a device that does not exist succeeds: the Android SDK retries a failed
// delete forever.
func (api *DeviceAPI) DeleteDevice(ctx context.Context, req device.DeleteDeviceRequestObject) (device.DeleteDeviceResponseObject, error) {
	in, ctx := requestScope(ctx)
	p, err := deviceRef(req.Platform, req.DeviceID)
	if err != nil {
		return nil, err
	}
	if err := api.db.DeleteDevice(ctx, in.ID, p, req.DeviceID); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return nil, err
	}
	return device.DeleteDevice200JSONResponse{}, nil
}

// UpdateDeviceMetadata implements PUT …/devices/{platform}/{device_id}/metadata.
func (api *DeviceAPI) UpdateDeviceMetadata(ctx context.Context, req device.UpdateDeviceMetadataRequestObject) (device.UpdateDeviceMetadataResponseObject, error) {
	in, ctx := requestScope(ctx)
	p, err := deviceRef(req.Platform, req.DeviceID)
	if err != nil {
		return nil, err
	}
	md, err := metadataMap(genericMetadata(req.Body))
	if err != nil {
		return nil, err
	}
	if err := api.db.UpdateDeviceMetadata(ctx, in.ID, p, req.DeviceID, md); err != nil {
		return nil, deviceError(err, req.DeviceID)
	}
	return device.UpdateDeviceMetadata200JSONResponse{}, nil
}

// UpdateFcmToken implements PUT …/devices/fcm/{device_id}/token.
func (api *DeviceAPI) UpdateFcmToken(ctx context.Context, req device.UpdateFcmTokenRequestObject) (device.UpdateFcmTokenResponseObject, error) {
	in, ctx := requestScope(ctx)
	p, err := deviceRef(device.Platform(storage.PlatformFCM), req.DeviceID)
	if err != nil {
		return nil, err
	}
	if err := checkToken(p, req.Body.Token); err != nil {
		return nil, err
	}
	if err := api.db.UpdateDeviceToken(ctx, in.ID, p, req.DeviceID, req.Body.Token); err != nil {
		return nil, deviceError(err, req.DeviceID)
	}
	return device.UpdateFcmToken200JSONResponse{}, nil
}

// SetDeviceUser implements PUT …/devices/{platform}/{device_id}/user. The
// token is checked before the device is looked up, so a caller without a
// valid token learns nothing about which devices exist.
func (api *DeviceAPI) SetDeviceUser(ctx context.Context, req device.SetDeviceUserRequestObject) (device.SetDeviceUserResponseObject, error) {
	p, err := deviceRef(req.Platform, req.DeviceID)
	if err != nil {
		return nil, err
	}
	var authorization string
	if c, ok := ctx.(*gin.Context); ok {
		authorization = c.GetHeader("Authorization")
	}
	in, ctx := requestScope(ctx)
	userID, err := api.verifier(in).Verify(authorization)
	if err != nil {
		return nil, tokenError(err)
	}
	if err := api.db.SetDeviceUser(ctx, in.ID, p, req.DeviceID, userID); err != nil {
		return nil, deviceError(err, req.DeviceID)
	}
	return device.SetDeviceUser200JSONResponse{}, nil
}

// tokenError maps a user token failure to the Beams status for it.
func tokenError(err error) *Error {
	switch {
	case errors.Is(err, beamsauth.ErrMissingToken):
		return newError(http.StatusUnauthorized, KindMissingToken, "The request needs an Authorization: Bearer <JWT> header.")
	case errors.Is(err, beamsauth.ErrMalformedToken):
		return newError(http.StatusUnauthorized, KindInvalidToken, "The token is malformed or not signed with HS256 and the instance's secret key.")
	case errors.Is(err, beamsauth.ErrExpired):
		return newError(http.StatusUnauthorized, KindTokenExpired, "The token has expired or is not valid yet.")
	case errors.Is(err, beamsauth.ErrInvalidIssuer):
		return newError(http.StatusForbidden, KindInvalidIssuer, "The token's iss claim is not this instance's issuer.")
	case errors.Is(err, beamsauth.ErrInvalidSubject):
		return badRequest(KindInvalidSub, "The token's sub claim (the user id) must be 1 to %d characters, none of them NUL.", beamsauth.MaxUserIDLength)
	}
	claim := "required"
	var missing *beamsauth.MissingClaimError
	if errors.As(err, &missing) {
		claim = missing.Claim
	}
	return badRequest(KindMissingClaim, "The token has no %s claim.", claim)
}

// ListDeviceInterests implements GET …/devices/{platform}/{device_id}/interests.
func (api *DeviceAPI) ListDeviceInterests(ctx context.Context, req device.ListDeviceInterestsRequestObject) (device.ListDeviceInterestsResponseObject, error) {
	in, ctx := requestScope(ctx)
	p, err := deviceRef(req.Platform, req.DeviceID)
	if err != nil {
		return nil, err
	}
	limit := MaxInterestPage
	if req.Params.Limit != nil {
		limit = *req.Params.Limit
		if limit < 1 || limit > MaxInterestPage {
			return nil, badRequest(KindInvalidLimit, "limit must be 1 to %d.", MaxInterestPage)
		}
	}
	after := ""
	if req.Params.Cursor != nil {
		if after, err = decodeInterestCursor(*req.Params.Cursor); err != nil {
			return nil, err
		}
	}
	interests, more, err := api.db.DeviceInterests(ctx, in.ID, p, req.DeviceID, after, limit)
	if err != nil {
		return nil, deviceError(err, req.DeviceID)
	}
	out := device.ListDeviceInterests200JSONResponse{Interests: interests}
	if more {
		next := encodeInterestCursor(interests[len(interests)-1])
		out.ResponseMetadata.NextCursor = &next
	}
	return out, nil
}

// The listing cursor is the last interest of the page, versioned and base64
// encoded so that clients treat it as opaque and a change of scheme can be
// told apart.
func encodeInterestCursor(last string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(interestCursorPrefix + last))
}

func decodeInterestCursor(cursor string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	last, ok := strings.CutPrefix(string(raw), interestCursorPrefix)
	if err != nil || !ok || !ValidInterestName(last) {
		return "", badRequest(KindInvalidCursor, "cursor is not a nextCursor this API returned.")
	}
	return last, nil
}

// SetDeviceInterests implements PUT …/devices/{platform}/{device_id}/interests.
func (api *DeviceAPI) SetDeviceInterests(ctx context.Context, req device.SetDeviceInterestsRequestObject) (device.SetDeviceInterestsResponseObject, error) {
	in, ctx := requestScope(ctx)
	p, err := deviceRef(req.Platform, req.DeviceID)
	if err != nil {
		return nil, err
	}
	interests := req.Body.Interests
	switch {
	case interests == nil:
		return nil, badRequest(KindMissingInterests, "The body must be {\"interests\": [names]}.")
	case len(interests) > storage.MaxDeviceInterests:
		return nil, badRequest(KindTooManyInterests, "A device holds at most %d interests; the request names %d.", storage.MaxDeviceInterests, len(interests))
	}
	for _, name := range interests {
		if !ValidInterestName(name) {
			return nil, invalidInterest(name)
		}
	}
	if err := api.db.SetDeviceInterests(ctx, in.ID, p, req.DeviceID, interests); err != nil {
		return nil, deviceError(err, req.DeviceID)
	}
	return device.SetDeviceInterests200JSONResponse{}, nil
}

// AddDeviceInterest implements POST …/interests/{interest_name}.
func (api *DeviceAPI) AddDeviceInterest(ctx context.Context, req device.AddDeviceInterestRequestObject) (device.AddDeviceInterestResponseObject, error) {
	if err := changeInterest(ctx, req.Platform, req.DeviceID, req.InterestName, api.db.AddDeviceInterest); err != nil {
		return nil, err
	}
	return device.AddDeviceInterest200JSONResponse{}, nil
}

// RemoveDeviceInterest implements DELETE …/interests/{interest_name}.
func (api *DeviceAPI) RemoveDeviceInterest(ctx context.Context, req device.RemoveDeviceInterestRequestObject) (device.RemoveDeviceInterestResponseObject, error) {
	if err := changeInterest(ctx, req.Platform, req.DeviceID, req.InterestName, api.db.RemoveDeviceInterest); err != nil {
		return nil, err
	}
	return device.RemoveDeviceInterest200JSONResponse{}, nil
}

// changeInterest checks a device reference and an interest name, then applies
// change (add or remove) to them.
func changeInterest(ctx context.Context, platform device.Platform, deviceID, interest string,
	change func(ctx context.Context, instanceID string, p storage.Platform, deviceID, interest string) error) error {
	in, ctx := requestScope(ctx)
	p, err := deviceRef(platform, deviceID)
	if err != nil {
		return err
	}
	if !ValidInterestName(interest) {
		return invalidInterest(interest)
	}
	if err := change(ctx, in.ID, p, deviceID, interest); err != nil {
		return deviceError(err, deviceID)
	}
	return nil
}

// GetWebVapidPublicKey implements GET …/web-vapid-public-key.
func (api *DeviceAPI) GetWebVapidPublicKey(ctx context.Context, _ device.GetWebVapidPublicKeyRequestObject) (device.GetWebVapidPublicKeyResponseObject, error) {
	in, _ := requestScope(ctx)
	if in.VAPID.PublicKey == "" {
		return nil, newError(http.StatusNotFound, KindWebPushNotConfigured, "The instance has no VAPID key pair.")
	}
	return device.GetWebVapidPublicKey200JSONResponse{VapidPublicKey: in.VAPID.PublicKey}, nil
}
