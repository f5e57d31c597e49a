package httpapi

import (
	"context"
	"sync"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/gen/channels"
	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/storage"
)

// historyPolicy is app's history setting as the store takes it.
func historyPolicy(app *storage.App) eventlog.Policy {
	return eventlog.Policy{Events: app.HistoryEvents, TTL: app.HistoryTTL}
}

// publishKept publishes ms and keeps them in app's history, when it keeps
// one: in a cluster that can, in the round trip of the publish (the hub's
// PublishKept), else after it.
func (api *ChannelsAPI) publishKept(app *storage.App, ms []hub.Message) error {
	p := historyPolicy(app)
	if api.history == nil || !p.On() {
		return api.hub.Publish(ms...)
	}
	kept, err := api.hub.PublishKept(api.history, p, api.now(), ms...)
	if err != nil {
		return err
	}
	if !kept {
		api.keep(app, ms)
	}
	return nil
}

// keep appends the published messages to app's history, when it keeps one.
// The events are delivered by then, so a failure is logged, not answered:
// a retried trigger would deliver them twice.
func (api *ChannelsAPI) keep(app *storage.App, ms []hub.Message) {
	p := historyPolicy(app)
	if api.history == nil || !p.On() {
		return
	}
	// From a pool: a slice handed to an interface method escapes, and this
	// is every trigger's path.
	buf := entryPool.Get().(*[]eventlog.Entry)
	entries := (*buf)[:0]
	for _, m := range ms {
		entries = append(entries, eventlog.Entry{Channel: m.Channel, Name: m.Event, Data: m.Data})
	}
	defer func() {
		clear(entries) // the pool holds no event data
		*buf = entries[:0]
		entryPool.Put(buf)
	}()
	// Not the request's context: a client that hangs up once its trigger
	// is sent must not cut the history short. The Redis client's own
	// timeouts bound the append.
	if err := api.history.Append(context.Background(), app.ID, p, entries, api.now()); err != nil {
		api.log.Warn("an event was delivered but not kept in its channel's history", zap.String("app_id", app.ID), zap.Error(err))
	}
}

var entryPool = sync.Pool{New: func() any { return new([]eventlog.Entry) }}

// ListChannelEvents implements GET /apps/{app_id}/channels/{channel_name}/events.
func (api *ChannelsAPI) ListChannelEvents(ctx context.Context, req channels.ListChannelEventsRequestObject) (channels.ListChannelEventsResponseObject, error) {
	app, name := appFrom(ctx), req.ChannelName
	if !hub.ValidChannelName(name) {
		return nil, badRequest(KindInvalidChannelName, "Channel name %q is invalid.", name)
	}
	q, err := historyQuery(req.Params)
	if err != nil {
		return nil, err
	}
	page, err := api.ReadHistory(ctx, app, name, q)
	if err != nil {
		return nil, err
	}
	return channels.ListChannelEvents200JSONResponse(page), nil
}

// ReadHistory returns a page of the history of app's channel as the API
// answers it, or the API's error: for the history endpoint and the admin
// API's, which authenticates otherwise.
func (api *ChannelsAPI) ReadHistory(ctx context.Context, app *storage.App, channel string, q eventlog.Query) (channels.ChannelEvents, error) {
	p := historyPolicy(app)
	if api.history == nil || !p.On() {
		return channels.ChannelEvents{}, badRequest(KindHistoryDisabled, "This app keeps no channel history; turn it on with herald apps update %s --history-events N.", app.ID)
	}
	if !hub.ValidChannelName(channel) {
		return channels.ChannelEvents{}, badRequest(KindInvalidChannelName, "Channel name %q is invalid.", channel)
	}
	page, err := api.history.Read(ctx, app.ID, channel, p, q, api.now())
	if err != nil {
		if ctx.Err() != nil {
			return channels.ChannelEvents{}, ctx.Err()
		}
		api.log.Warn("reading a channel's history failed", zap.String("app_id", app.ID), zap.Error(err))
		return channels.ChannelEvents{}, clusterUnavailable
	}
	out := channels.ChannelEvents{Events: make([]channels.HistoryEvent, len(page.Events))}
	for i, ev := range page.Events {
		out.Events[i] = channels.HistoryEvent{ID: ev.ID.String(), Event: ev.Name, Data: ev.Data, Timestamp: int64(ev.ID.MS)}
	}
	if page.More {
		next := page.Events[len(page.Events)-1].ID.String()
		out.NextCursor = &next
	}
	return out, nil
}

// historyQuery checks the parameters of a history read.
func historyQuery(params channels.ListChannelEventsParams) (eventlog.Query, error) {
	var q eventlog.Query
	if l := params.Limit; l != nil {
		if *l < 1 || *l > eventlog.MaxPage {
			return q, badRequest(KindInvalidLimit, "limit must be 1 to %d, not %d.", eventlog.MaxPage, *l)
		}
		q.Limit = *l
	}
	if d := params.Direction; d != nil {
		if !d.Valid() {
			return q, badRequest(KindInvalidParameter, "direction must be newest_first or oldest_first, not %q.", *d)
		}
		q.OldestFirst = *d == channels.OldestFirst
	}
	from := params.Cursor
	if params.After != nil {
		if params.Cursor != nil {
			return q, badRequest(KindInvalidParameter, "Give after or cursor, not both: the next page of an after read is cursor=<next_cursor> with direction=oldest_first.")
		}
		if params.Direction != nil && !q.OldestFirst {
			return q, badRequest(KindInvalidParameter, "after reads oldest first; leave direction out or make it oldest_first.")
		}
		q.OldestFirst = true
		from = params.After
	}
	if from != nil {
		id, err := eventlog.ParseID(*from)
		if err != nil || id.IsZero() {
			return q, badRequest(KindInvalidEventID, "%q is not an event id (<milliseconds>-<sequence>, as an event's id or next_cursor).", *from)
		}
		q.After = id
	}
	return q, nil
}
