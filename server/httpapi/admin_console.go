package httpapi

import (
	"context"
	"errors"

	"github.com/heraldrt/herald/gen/admin"
	"github.com/heraldrt/herald/server/history"
)

// ForConsole gives the admin API what the debug console's endpoints need:
// the Channels API, whose trigger path the event creator takes, and the
// node's traffic history with the node's id (empty on a single node). Call
// it before serving.
func (api *AdminAPI) ForConsole(channels *ChannelsAPI, h *history.Recorder, node string) *AdminAPI {
	api.channels, api.history, api.node = channels, h, node
	return api
}

var errNoConsole = errors.New("admin: ForConsole was not called")

// TriggerAppEvent implements POST /admin/v1/apps/{app_id}/events: the
// Channels API's trigger, with the admin token in place of the app's
// signature.
func (api *AdminAPI) TriggerAppEvent(ctx context.Context, req admin.TriggerAppEventRequestObject) (admin.TriggerAppEventResponseObject, error) {
	if api.channels == nil {
		return nil, errNoConsole
	}
	a, err := api.db.GetApp(requestCtx(ctx), req.AppId)
	if err != nil {
		return nil, storeError(appResource, req.AppId, err)
	}
	b := req.Body
	if err := api.channels.Trigger(&a, b.Name, b.Data, b.Channels); err != nil {
		return nil, err
	}
	return admin.TriggerAppEvent200JSONResponse{}, nil
}

// GetAppHistory implements GET /admin/v1/apps/{app_id}/history.
func (api *AdminAPI) GetAppHistory(ctx context.Context, req admin.GetAppHistoryRequestObject) (admin.GetAppHistoryResponseObject, error) {
	if _, err := api.db.GetApp(requestCtx(ctx), req.AppId); err != nil {
		return nil, storeError(appResource, req.AppId, err)
	}
	h, err := api.historyOf(history.App, req.AppId, history.AppSeriesNames[:])
	if err != nil {
		return nil, err
	}
	return admin.GetAppHistory200JSONResponse(h), nil
}

// GetInstanceHistory implements GET /admin/v1/instances/{instance_id}/history.
func (api *AdminAPI) GetInstanceHistory(ctx context.Context, req admin.GetInstanceHistoryRequestObject) (admin.GetInstanceHistoryResponseObject, error) {
	if _, err := api.db.GetInstance(requestCtx(ctx), req.InstanceId); err != nil {
		return nil, storeError(instanceResource, req.InstanceId, err)
	}
	h, err := api.historyOf(history.Instance, req.InstanceId, history.InstanceSeriesNames[:])
	if err != nil {
		return nil, err
	}
	return admin.GetInstanceHistory200JSONResponse(h), nil
}

// historyOf is the history of one app or instance as the API gives it.
func (api *AdminAPI) historyOf(k history.Kind, id string, names []string) (admin.History, error) {
	if api.history == nil {
		return admin.History{}, errNoConsole
	}
	h := api.history.Get(k, id)
	out := admin.History{
		Scope: admin.Node, Node: api.node, IntervalSeconds: int(h.Interval.Seconds()),
		Tracked: h.Tracked, Times: h.Times, Series: make([]admin.HistorySeries, len(h.Series)),
	}
	for i, values := range h.Series {
		unit := admin.PerSecond
		if k == history.App && i == history.AppConnections {
			unit = admin.Count
		}
		out.Series[i] = admin.HistorySeries{Name: names[i], Unit: unit, Values: values}
	}
	return out, nil
}
