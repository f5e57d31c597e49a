package storage

import (
	"context"
	"database/sql"
	"fmt"
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
	return out, rows.Err()
}
