package ws

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/text"
	"github.com/heraldrt/herald/server/signing"
)

// Limits of client messages.
const (
	// MaxClientEventDataBytes is the largest client event data relayed.
	MaxClientEventDataBytes = 10 * 1024
	// ClientEventsPerSecond is the client event rate allowed per connection.
	ClientEventsPerSecond = 10
	// hardReadLimit is where the WebSocket library gives up on a message and
	// closes the connection (1009); below it, oversized messages are only
	// refused with a pusher:error.
	hardReadLimit = 1 << 20
)

// clientMessage is a frame sent by a client.
type clientMessage struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel"`
	Data    json.RawMessage `json:"data"`
}

// sendError queues a non-fatal pusher:error; code 0 is sent as null, as
// Pusher does for protocol misuse that has no code of its own.
func (p *peer) sendError(code int, message string) {
	p.conn.Send(errorFrame(code, message))
}

// handle dispatches one client message.
func (p *peer) handle(raw []byte) {
	msg, problem := parseClientMessage(raw)
	if problem != "" {
		p.sendError(0, problem)
		return
	}
	switch {
	case msg.Event == "pusher:ping":
		p.conn.Send(pongFrame)
	case msg.Event == "pusher:pong":
		// activity already recorded
	case msg.Event == "pusher:subscribe":
		p.subscribe(msg)
	case msg.Event == "pusher:unsubscribe":
		p.unsubscribe(msg)
	case msg.Event == "pusher:signin":
		p.signin(msg)
	case strings.HasPrefix(msg.Event, "client-"):
		p.clientEvent(msg)
	default:
		p.sendError(0, "Unsupported event received on socket: "+text.Truncate(msg.Event, 64))
	}
}

// parseClientMessage decodes a client frame, which must be a JSON object with
// a string event; otherwise it returns the problem, to be sent to the client.
func parseClientMessage(raw []byte) (msg clientMessage, problem string) {
	if err := json.Unmarshal(raw, &msg); err != nil {
		return msg, "Invalid message: expected a JSON object with an event"
	}
	if msg.Event == "" {
		return msg, "Invalid message: the event field is missing"
	}
	return msg, ""
}

// subscribeData is the data of pusher:subscribe.
type subscribeData struct {
	Channel     string `json:"channel"`
	Auth        string `json:"auth"`
	ChannelData string `json:"channel_data"`
	// Recovery: Herald's recovery plugin asks for a recoverable
	// subscription (recovery.go).
	Recovery *recoveryData `json:"recovery"`
}

// decodeData unmarshals a message's data into v, accepting both an object
// and a JSON string holding one (clients send either).
func decodeData(data json.RawMessage, v any) error {
	var s string
	if len(data) > 0 && data[0] == '"' {
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		data = json.RawMessage(s)
	}
	return json.Unmarshal(data, v)
}

// channelData is the channel_data of a presence subscription.
type channelData struct {
	UserID   json.RawMessage `json:"user_id"`
	UserInfo json.RawMessage `json:"user_info"`
}

// userIDString accepts a user_id given as a string or a number.
func userIDString(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, s != ""
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return n.String(), true
	}
	return "", false
}

func (p *peer) subscriptionError(channel, typ, message string, status int) {
	p.conn.Send(subscriptionErrorFrame(channel, typ, message, status))
}

// subscriptionErrorFrame is pusher:subscription_error.
func subscriptionErrorFrame(channel, typ, message string, status int) []byte {
	return hub.JSONFrame("pusher:subscription_error", channel, struct {
		Type   string `json:"type"`
		Error  string `json:"error"`
		Status int    `json:"status"`
	}{typ, message, status})
}

func (p *peer) subscribe(msg clientMessage) {
	var d subscribeData
	if err := decodeData(msg.Data, &d); err != nil || d.Channel == "" {
		p.sendError(0, "Invalid pusher:subscribe: data must hold the channel name")
		return
	}
	name := d.Channel
	if !hub.ValidChannelName(name) {
		p.subscriptionError(name, "InvalidChannel", "Invalid channel name: use 1 to 200 characters of A-Z a-z 0-9 _ - = @ , . ;", 400)
		return
	}
	app, found := p.s.apps.ByID(p.appID)
	if !found || !app.Enabled {
		p.conn.Close(hub.CloseAppDisabled)
		return
	}
	// Subscribing again to a channel the connection is on only answers
	// subscription_succeeded again: no limit applies to it.
	_, already := p.conn.Subscription(name)
	if !already && p.conn.SubscriptionCount() >= p.s.opts.MaxChannelsPerConn {
		p.subscriptionError(name, "LimitReached", "This connection is subscribed to the maximum of "+itoa(p.s.opts.MaxChannelsPerConn)+" channels.", 403)
		return
	}
	kind, cache := hub.ChannelKind(name)
	opts := hub.SubscribeOptions{MaxMembers: app.MaxPresenceMembers}
	switch kind {
	case hub.ServerToUser:
		// Only the connection's own signed-in user, and only after sign-in.
		if user := p.conn.UserID(); user == "" || name != hub.ServerToUserPrefix+user {
			p.subscriptionError(name, "AuthError", "Server-to-user channels are only for the signed-in user's own id.", 403)
			return
		}
	case hub.Private, hub.PrivateEncrypted:
		if !signing.VerifyChannelAuth(d.Auth, app.Key, app.Secret, p.conn.SocketID(), name, "") {
			p.subscriptionError(name, "AuthError", "Invalid signature: the auth string does not authorize this socket for this channel.", 401)
			return
		}
	case hub.Presence:
		if !signing.VerifyChannelAuth(d.Auth, app.Key, app.Secret, p.conn.SocketID(), name, d.ChannelData) {
			p.subscriptionError(name, "AuthError", "Invalid signature: the auth string does not authorize this socket and channel_data for this channel.", 401)
			return
		}
		var pd channelData
		if err := json.Unmarshal([]byte(d.ChannelData), &pd); err != nil {
			p.subscriptionError(name, "AuthError", "Invalid channel_data: it must be a JSON object with a user_id.", 400)
			return
		}
		userID, ok := userIDString(pd.UserID)
		if !ok {
			p.subscriptionError(name, "AuthError", "Invalid channel_data: user_id must be a non-empty string or a number.", 400)
			return
		}
		if len(pd.UserInfo) > app.MaxPresenceUserInfoBytes {
			p.subscriptionError(name, "LimitReached", "user_info is larger than "+itoa(app.MaxPresenceUserInfoBytes)+" bytes.", 400)
			return
		}
		opts.Member = &hub.Member{UserID: userID, Info: pd.UserInfo}
		if p.s.hub.Clustered() {
			// In a cluster the hub learns the channel is full only from
			// the cluster's answer; it queues this then.
			opts.FullRefusal = subscriptionErrorFrame(name, "LimitReached", presenceFullMessage(app.MaxPresenceMembers), 403)
		}
	}
	// After the authorization checks, so that refused attempts, which make
	// no webhook, take nothing from the bucket.
	if !already && subscribeMakesWebhooks(app, name, kind, cache) && !p.allowSubscribe() {
		p.s.stats.subscribeLimited()
		p.subscriptionError(name, "LimitReached", "Too many subscriptions: this connection may subscribe to "+
			strconv.FormatFloat(p.s.opts.SubscribeRate, 'g', -1, 64)+" channels a second after the first "+
			itoa(p.s.opts.SubscribeBurst)+"; try again later.", 429)
		return
	}
	opts.MaxAppSubscriptions = p.s.opts.MaxSubscriptionsPerApp
	if d.Recovery != nil && !already {
		opts.Recovery = p.recovery(app, name, d.Recovery)
	}
	err := p.s.hub.Subscribe(p.conn, name, opts)
	if err == nil && (kind == hub.Private || kind == hub.PrivateEncrypted || kind == hub.Presence) {
		p.authorized.Store(true)
	}
	if err == nil && d.Recovery != nil && !already && opts.Recovery == nil {
		p.refuseRecovery(name, d.Recovery, p.unrecoverable(app))
	}
	switch {
	case errors.Is(err, hub.ErrPresenceFull):
		p.subscriptionError(name, "LimitReached", presenceFullMessage(app.MaxPresenceMembers), 403)
	case errors.Is(err, hub.ErrTooManySubscriptions):
		p.s.stats.appSubscriptionsFull()
		p.subscriptionError(name, "LimitReached", "The app has the maximum of "+itoa(p.s.opts.MaxSubscriptionsPerApp)+
			" subscriptions over all its connections; try again later.", 429)
	case err != nil && !errors.Is(err, hub.ErrConnRemoved):
		p.s.log.Error("subscribe failed", zap.String("channel", name), zap.Error(err))
		p.subscriptionError(name, "ServerError", "The subscription failed.", 500)
	}
}

// signinData is the data of pusher:signin.
type signinData struct {
	Auth     string `json:"auth"`
	UserData string `json:"user_data"`
}

// userData is the part of the signed user_data Herald reads.
type userData struct {
	ID        json.RawMessage `json:"id"`
	Watchlist []string        `json:"watchlist"`
}

// signin authenticates the connection as a user. A bad signature or user_data
// without an id closes the connection with 4009, as Pusher does.
func (p *peer) signin(msg clientMessage) {
	var d signinData
	if err := decodeData(msg.Data, &d); err != nil {
		p.sendError(0, "Invalid pusher:signin: data must hold auth and user_data")
		return
	}
	if p.conn.UserID() != "" {
		p.sendError(0, "This connection is already signed in.")
		return
	}
	app, found := p.s.apps.ByID(p.appID)
	if !found || !signing.VerifyUserAuth(d.Auth, app.Key, app.Secret, p.conn.SocketID(), d.UserData) {
		p.conn.Close(hub.CloseReason{Code: hub.CloseUnauthorized.Code, Message: "Invalid signature: the auth string does not sign this socket and user_data"})
		return
	}
	var ud userData
	if err := json.Unmarshal([]byte(d.UserData), &ud); err != nil {
		p.conn.Close(hub.CloseReason{Code: hub.CloseUnauthorized.Code, Message: "Invalid user_data: it must be a JSON object"})
		return
	}
	id, ok := userIDString(ud.ID)
	if !ok {
		p.conn.Close(hub.CloseReason{Code: hub.CloseUnauthorized.Code, Message: "Invalid user_data: the id field is required"})
		return
	}
	answer := [][]byte{hub.JSONFrame("pusher:signin_success", "", struct {
		UserData string `json:"user_data"`
	}{d.UserData})}
	if len(ud.Watchlist) > hub.MaxWatchlist {
		answer = append(answer, errorFrame(4302, "The watchlist holds more than "+itoa(hub.MaxWatchlist)+" user ids; only the first "+itoa(hub.MaxWatchlist)+" are watched."))
	}
	// The hub queues the answer once the user is registered, so a watcher
	// signing in after this client heard signin_success sees it online.
	if err := p.s.hub.SignIn(p.conn, id, ud.Watchlist, answer...); err != nil {
		return // removed meanwhile
	}
	p.authorized.Store(true)
}

func (p *peer) unsubscribe(msg clientMessage) {
	var d subscribeData
	if err := decodeData(msg.Data, &d); err != nil || d.Channel == "" {
		p.sendError(0, "Invalid pusher:unsubscribe: data must hold the channel name")
		return
	}
	p.s.hub.Unsubscribe(p.conn, d.Channel)
}

// clientEvent relays a client- event to the channel's other subscribers.
func (p *peer) clientEvent(msg clientMessage) {
	app, found := p.s.apps.ByID(p.appID)
	if !found || !app.ClientEvents {
		p.sendError(0, "Client events are not enabled for this app.")
		return
	}
	kind, _ := hub.ChannelKind(msg.Channel)
	if kind != hub.Private && kind != hub.Presence {
		p.sendError(0, "Client events are only allowed on private and presence channels (not encrypted ones).")
		return
	}
	userID, subscribed := p.conn.Subscription(msg.Channel)
	if !subscribed {
		p.sendError(0, "Client event rejected: the connection is not subscribed to "+text.Truncate(msg.Channel, 200)+".")
		return
	}
	if len(msg.Event) > hub.MaxEventNameLength {
		p.sendError(0, "Client event rejected: the event name is longer than 200 characters.")
		return
	}
	data := dataString(msg.Data)
	if len(data) > MaxClientEventDataBytes {
		p.sendError(0, "Client event rejected: data is larger than 10 KB.")
		return
	}
	now := time.Now()
	if now.Sub(p.rateWindow) >= time.Second {
		p.rateWindow, p.rateCount = now, 0
	}
	if p.rateCount >= ClientEventsPerSecond {
		p.sendError(4301, "Client event rejected: more than 10 client events per second.")
		return
	}
	p.rateCount++
	if err := p.s.hub.PublishClientEvent(hub.Message{AppID: p.appID, Channel: msg.Channel, Event: msg.Event, Data: data, UserID: userID, ExcludeSocketID: p.conn.SocketID()}); err != nil {
		p.sendError(0, "Client event not relayed: this server cannot reach the rest of the cluster; try again later.")
		return
	}
	p.s.stats.clientEvent()
}

// dataString returns client event data as the string to relay: a JSON string
// as its contents, anything else as its JSON text. Receivers get it as the
// data string of the frame, as with events triggered over HTTP.
func dataString(raw json.RawMessage) string {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}

// errorFrame is a pusher:error with code (0 sent as null) and message.
func errorFrame(code int, message string) []byte {
	var c *int
	if code != 0 {
		c = &code
	}
	return hub.JSONFrame("pusher:error", "", struct {
		Code    *int   `json:"code"`
		Message string `json:"message"`
	}{c, message})
}

func itoa(n int) string { return strconv.Itoa(n) }

// presenceFullMessage is the error of a subscription to a full presence
// channel.
func presenceFullMessage(max int) string {
	return "The presence channel has the maximum of " + itoa(max) + " members."
}
