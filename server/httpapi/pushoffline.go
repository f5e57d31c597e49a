package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/heraldrt/herald/gen/channels"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/storage"
)

// The answers' delivered_via values, addressable.
var (
	viaSocket = channels.Socket
	viaPush   = channels.Push
)

// triggerOrPush triggers ev, which carries push_if_offline, to its one
// user: over the socket when the user has a signed-in connection anywhere,
// as a push notification through the app's Push instance otherwise.
// Everything that can be wrong with the request is refused first, whichever
// way the event would go, so that the answer to a bad request does not
// depend on whether its user happens to be online.
//
// The check and the delivery are two steps, not one: a user who signs in
// between them gets the push (and not the socket event); a user whose last
// connection closes between them gets the socket event on no connection.
// Redis holds another node's sign-ins from a few milliseconds after they
// happen (hub.State's SignedIn), which widens that window by as much.
func (api *ChannelsAPI) triggerOrPush(ctx context.Context, app *storage.App, ev event, body *channels.PushIfOffline) (channels.TriggerEventResponseObject, error) {
	if len(ev.channels) != 1 || !strings.HasPrefix(ev.channels[0], hub.ServerToUserPrefix) {
		return nil, badRequest(KindInvalidPushChannel, "push_if_offline goes to one user: give one channel, %s<user id>.", hub.ServerToUserPrefix)
	}
	userID := strings.TrimPrefix(ev.channels[0], hub.ServerToUserPrefix)
	in, err := api.pushInstance(app)
	if err != nil {
		return nil, err
	}
	if n := pushIfOfflineSize(body); n > MaxUsersPublishBytes {
		return nil, newError(http.StatusRequestEntityTooLarge, KindBodyTooLarge,
			"push_if_offline holds %d bytes; a publish to users is at most %d KiB.", n, MaxUsersPublishBytes/1024)
	}
	// Its webhook URL comes from the app's server, not the instance's: it
	// may lead only where a Web Push endpoint may.
	p, err := preparePublish(publishRequest{kind: storage.TargetUsers, targets: []string{userID},
		webhookURL: body.WebhookURL, apns: body.Apns, fcm: body.Fcm, web: body.Web, guarded: true, hookGuard: api.pushes.strangerHooks})
	if err != nil {
		return nil, pushBodyError(err)
	}
	online, err := api.hub.State().SignedIn(app.ID, userID)
	if err != nil {
		return nil, stateError(err)
	}
	res := channels.TriggerEvent200JSONResponse{DeliveredVia: &viaSocket}
	if online {
		if err := api.publish(app, ev); err != nil {
			return nil, err
		}
	} else {
		if c, ok := ctx.(*gin.Context); ok {
			ctx = c.Request.Context() // for storage, as requestScope says
		}
		if err := api.pushes.takeToken(ctx, in.ID); err != nil {
			return nil, err
		}
		id, err := api.pushes.store(ctx, in, p)
		if err != nil {
			return nil, err
		}
		res.DeliveredVia, res.PublishID = &viaPush, &id
	}
	if ev.info.any() {
		attrs, err := api.attributes(app.ID, ev.channels[0], ev.info)
		if err != nil {
			return nil, err
		}
		res.Channels = &map[string]channels.ChannelAttributes{ev.channels[0]: attrs}
	}
	return res, nil
}

// pushIfOfflineSize is the bytes of push_if_offline's payloads and webhook
// URL, which the Publish API's bound of a publish to users
// (MaxUsersPublishBytes) bounds: the trigger's own body may be larger.
func pushIfOfflineSize(body *channels.PushIfOffline) int {
	n := 0
	for _, raw := range []*json.RawMessage{body.Apns, body.Fcm, body.Web} {
		if raw != nil {
			n += len(*raw)
		}
	}
	if body.WebhookURL != nil {
		n += len(*body.WebhookURL)
	}
	return n
}

// pushInstance is the enabled Push instance app is linked to, or the 400
// that says why there is none.
func (api *ChannelsAPI) pushInstance(app *storage.App) (*storage.Instance, error) {
	if api.pushes == nil || app.PushInstance == "" {
		return nil, badRequest(KindPushNotLinked, "push_if_offline needs the app linked to a Push instance (herald apps update %s --push-instance <instance id>).", app.ID)
	}
	in := api.pushes.instances.ByID(app.PushInstance)
	if in == nil || !in.Enabled {
		return nil, badRequest(KindPushNotLinked, "The app's Push instance %s does not exist or is disabled, so push_if_offline cannot be sent.", app.PushInstance)
	}
	return in, nil
}

// pushBodyError is a publish's refusal (422 on the Publish API) as the 400
// of a trigger whose push_if_offline does not hold a valid publish.
func pushBodyError(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	return newError(http.StatusBadRequest, e.Kind, "push_if_offline: %s", e.Description)
}
