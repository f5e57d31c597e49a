package node

import (
	"github.com/heraldrt/herald/server/directory"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/ws"
	"github.com/heraldrt/herald/storage"
)

// socketApps is the app directory as the WebSocket transport reads it: each
// lookup copies the app's policy out of the directory's current snapshot
// (no allocation), so an app changed with `herald apps` applies from the
// next lookup on, as before.
type socketApps struct{ dir *directory.Apps }

var _ ws.AppLookup = socketApps{}

// ByKey implements ws.AppLookup.
func (a socketApps) ByKey(key string) (ws.App, bool) { return socketApp(a.dir.ByKey(key)) }

// ByID implements ws.AppLookup.
func (a socketApps) ByID(id string) (ws.App, bool) { return socketApp(a.dir.ByID(id)) }

// socketApp is what the transport needs of app; false when app is nil.
func socketApp(app *storage.App) (ws.App, bool) {
	if app == nil {
		return ws.App{}, false
	}
	return ws.App{
		ID:                       app.ID,
		Key:                      app.Key,
		Secret:                   app.Secret,
		Enabled:                  app.Enabled,
		ClientEvents:             app.ClientEvents,
		SubscriptionCount:        app.SubscriptionCount,
		UserAuthTimeout:          app.UserAuthTimeout,
		MaxConnections:           app.MaxConnections,
		MaxPresenceMembers:       app.MaxPresenceMembers,
		MaxPresenceUserInfoBytes: app.MaxPresenceUserInfoBytes,
		History:                  eventlog.Policy{Events: app.HistoryEvents, TTL: app.HistoryTTL},
		RecoveryWindow:           app.RecoveryWindow,
		Webhooks:                 appWebhooks(app),
	}, true
}

// webhookFilter is an app's webhook endpoints as the transport asks about
// them. It holds the stored app, which the directory replaces rather than
// changes, so it allocates nothing per lookup.
type webhookFilter struct{ app *storage.App }

// appWebhooks is app's endpoints, or nil when it has none.
func appWebhooks(app *storage.App) ws.Webhooks {
	if len(app.Webhooks) == 0 {
		return nil
	}
	return webhookFilter{app}
}

// Sends implements ws.Webhooks with the rule the webhook sender applies
// (storage.Webhook.Takes).
func (f webhookFilter) Sends(kind hub.EventKind, channel string) bool {
	for _, w := range f.app.Webhooks {
		if w.Takes(string(kind), channel) {
			return true
		}
	}
	return false
}
