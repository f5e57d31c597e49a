package storage

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// PublishSummary is a publish's progress and report counts, without its
// payload: what the debug console lists.
type PublishSummary struct {
	ID         string
	TargetKind PublishTargetKind
	Targets    int // interests or users named
	State      PublishState
	Targeted   int // deliveries created
	Sent       int // accepted by a gateway
	Failed     int // refused by a gateway, or given up
	Delivered  int // devices that reported it delivered
	Opened     int // devices that reported it opened
	CreatedAt  time.Time
	FinishedAt time.Time // zero until done
	// Nodes are the pages each node recorded, by node (see PublishShares).
	Nodes []NodeShare
}

// RecentPublishes returns the instance's latest publishes, newest first, at
// most limit of them. It reads the publishes_instance index backwards and one
// report-counts row per publish, so it costs the same however many
// publishes the instance has.
func (db *DB) RecentPublishes(ctx context.Context, instanceID string, limit int) ([]PublishSummary, error) {
	rows, err := db.reader.QueryContext(ctx, `SELECT p.id, p.target_kind, `+db.d.jsonLength("p.targets")+`, p.state,
			p.targeted, p.sent, p.failed, COALESCE(r.delivered, 0), COALESCE(r.opened, 0), p.created_at_ms, p.finished_at_ms
		FROM publishes p LEFT JOIN publish_report_counts r ON r.instance_id = p.instance_id AND r.publish_id = p.id
		WHERE p.instance_id = ? ORDER BY p.created_at_ms DESC, p.id DESC LIMIT ?`, instanceID, limit)
	if err != nil {
		return nil, fmt.Errorf("recent publishes of instance %q: %w", instanceID, err)
	}
	defer rows.Close()
	out := []PublishSummary{}
	for rows.Next() {
		var s PublishSummary
		var kind, state string
		var created int64
		var finished sql.NullInt64
		if err := rows.Scan(&s.ID, &kind, &s.Targets, &state, &s.Targeted, &s.Sent, &s.Failed, &s.Delivered, &s.Opened,
			&created, &finished); err != nil {
			return nil, fmt.Errorf("recent publishes of instance %q: %w", instanceID, err)
		}
		s.TargetKind, s.State, s.CreatedAt = PublishTargetKind(kind), PublishState(state), fromMillis(created)
		if finished.Valid {
			s.FinishedAt = fromMillis(finished.Int64)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("recent publishes of instance %q: %w", instanceID, err)
	}
	if err := db.addShares(ctx, out); err != nil {
		return nil, fmt.Errorf("recent publishes of instance %q: %w", instanceID, err)
	}
	return out, nil
}

// addShares fills in the publishes' split between nodes, in one query.
func (db *DB) addShares(ctx context.Context, pubs []PublishSummary) error {
	if len(pubs) == 0 {
		return nil
	}
	byID := make(map[string]*PublishSummary, len(pubs))
	args := make([]any, 0, len(pubs))
	for i := range pubs {
		byID[pubs[i].ID] = &pubs[i]
		args = append(args, pubs[i].ID)
	}
	rows, err := db.reader.QueryContext(ctx, `SELECT publish_id, owner, COUNT(*), SUM(targeted), SUM(sent), SUM(failed)
		FROM publish_pages WHERE done = 1 AND publish_id IN (`+strings.Repeat(", ?", len(args))[2:]+`)
		GROUP BY publish_id, owner ORDER BY publish_id, owner`, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n NodeShare
		if err := rows.Scan(&id, &n.Node, &n.Pages, &n.Targeted, &n.Sent, &n.Failed); err != nil {
			return err
		}
		if p := byID[id]; p != nil {
			p.Nodes = append(p.Nodes, n)
		}
	}
	return rows.Err()
}
