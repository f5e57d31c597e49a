package httpapi

import (
	"context"

	"github.com/heraldrt/herald/gen/admin"
)

// Limits of the recent publishes list (spec/admin.yaml states the same).
const (
	defaultRecentPublishes = 20
	maxRecentPublishes     = 100
)

// ListInstancePublishes implements GET /admin/v1/instances/{instance_id}/publishes.
func (api *AdminAPI) ListInstancePublishes(ctx context.Context, req admin.ListInstancePublishesRequestObject) (admin.ListInstancePublishesResponseObject, error) {
	ctx = requestCtx(ctx)
	limit := defaultRecentPublishes
	if req.Params.Limit != nil {
		limit = *req.Params.Limit
	}
	if limit < 1 || limit > maxRecentPublishes {
		return nil, badRequest(KindInvalidLimit, "limit must be between 1 and %d.", maxRecentPublishes)
	}
	if _, err := api.db.GetInstance(ctx, req.InstanceID); err != nil {
		return nil, storeError(instanceResource, req.InstanceID, err)
	}
	list, err := api.db.RecentPublishes(ctx, req.InstanceID, limit)
	if err != nil {
		return nil, err
	}
	out := admin.ListInstancePublishes200JSONResponse{Publishes: make([]admin.PublishSummary, 0, len(list))}
	for _, p := range list {
		s := admin.PublishSummary{
			PublishID: p.ID, TargetKind: admin.PublishSummaryTargetKind(p.TargetKind), Targets: p.Targets,
			State: admin.PublishSummaryState(p.State), Targeted: p.Targeted, Sent: p.Sent, Failed: p.Failed,
			Delivered: p.Delivered, Opened: p.Opened, CreatedAt: p.CreatedAt,
		}
		if !p.FinishedAt.IsZero() {
			f := p.FinishedAt
			s.FinishedAt = &f
		}
		nodes := make([]admin.PublishNodeShare, 0, len(p.Nodes))
		for _, n := range p.Nodes {
			nodes = append(nodes, admin.PublishNodeShare{Node: n.Node, Pages: n.Pages, Targeted: n.Targeted, Sent: n.Sent, Failed: n.Failed})
		}
		s.Nodes = &nodes
		out.Publishes = append(out.Publishes, s)
	}
	return out, nil
}
