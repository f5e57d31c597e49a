package httpapi

import (
	"context"

	"github.com/heraldrt/herald/gen/admin"
	"github.com/heraldrt/herald/gen/channels"
	"github.com/heraldrt/herald/server/console/traffic"
)

// ConsoleParts are what the debug console's endpoints of the admin API
// read: the Channels API, whose trigger path the event creator takes, and
// the node's traffic history with the node's id (empty on a single node).
type ConsoleParts struct {
	Channels *ChannelsAPI
	History  *traffic.Recorder
	Node     string
}

// TriggerAppEvent implements POST /admin/v1/apps/{app_id}/events: the
// Channels API's trigger, with the admin token in place of the app's
// signature.
func (api *AdminAPI) TriggerAppEvent(ctx context.Context, req admin.TriggerAppEventRequestObject) (admin.TriggerAppEventResponseObject, error) {
	a, err := api.db.GetApp(requestCtx(ctx), req.AppID)
	if err != nil {
		return nil, storeError(appResource, req.AppID, err)
	}
	b := req.Body
	if err := api.console.Channels.Trigger(&a, b.Name, b.Data, b.Channels); err != nil {
		return nil, err
	}
	return admin.TriggerAppEvent200JSONResponse{}, nil
}

// GetAppChannelEvents implements GET
// /admin/v1/apps/{app_id}/channels/{channel_name}/events: the Channels
// API's history read, newest first, for the console.
func (api *AdminAPI) GetAppChannelEvents(ctx context.Context, req admin.GetAppChannelEventsRequestObject) (admin.GetAppChannelEventsResponseObject, error) {
	a, err := api.db.GetApp(requestCtx(ctx), req.AppID)
	if err != nil {
		return nil, storeError(appResource, req.AppID, err)
	}
	q, err := historyQuery(channels.ListChannelEventsParams{Limit: req.Params.Limit, Cursor: req.Params.Cursor})
	if err != nil {
		return nil, err
	}
	page, err := api.console.Channels.ReadHistory(ctx, &a, req.ChannelName, q)
	if err != nil {
		return nil, err
	}
	out := admin.GetAppChannelEvents200JSONResponse{Events: make([]admin.ChannelHistoryEvent, len(page.Events)), NextCursor: page.NextCursor}
	for i, e := range page.Events {
		out.Events[i] = admin.ChannelHistoryEvent(e)
	}
	return out, nil
}

// GetAppHistory implements GET /admin/v1/apps/{app_id}/history.
func (api *AdminAPI) GetAppHistory(ctx context.Context, req admin.GetAppHistoryRequestObject) (admin.GetAppHistoryResponseObject, error) {
	if _, err := api.db.GetApp(requestCtx(ctx), req.AppID); err != nil {
		return nil, storeError(appResource, req.AppID, err)
	}
	return admin.GetAppHistory200JSONResponse(api.historyOf(traffic.App, req.AppID)), nil
}

// GetInstanceHistory implements GET /admin/v1/instances/{instance_id}/history.
func (api *AdminAPI) GetInstanceHistory(ctx context.Context, req admin.GetInstanceHistoryRequestObject) (admin.GetInstanceHistoryResponseObject, error) {
	if _, err := api.db.GetInstance(requestCtx(ctx), req.InstanceID); err != nil {
		return nil, storeError(instanceResource, req.InstanceID, err)
	}
	return admin.GetInstanceHistory200JSONResponse(api.historyOf(traffic.Instance, req.InstanceID)), nil
}

// historyOf is the history of one app or instance as the API gives it.
func (api *AdminAPI) historyOf(k traffic.Kind, id string) admin.History {
	h := api.console.History.Get(k, id)
	out := admin.History{
		Scope: admin.Node, Node: api.console.Node, IntervalSeconds: int(h.Interval.Seconds()),
		Tracked: h.Tracked, Times: h.Times, Series: make([]admin.HistorySeries, len(h.Series)),
	}
	names := traffic.Names(k)
	for i, values := range h.Series {
		unit := admin.PerSecond
		if traffic.Gauge(k, i) {
			unit = admin.Count
		}
		out.Series[i] = admin.HistorySeries{Name: names[i], Unit: unit, Values: values}
	}
	return out
}
