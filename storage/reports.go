package storage

import (
	"context"
	"database/sql"
	"fmt"
)

// ReportKind is what a device reports about a notification.
type ReportKind string

// The report kinds.
const (
	ReportDelivery ReportKind = "delivery" // the device received the notification
	ReportOpen     ReportKind = "open"     // the user opened (tapped) it
)

// ReportEvent is one delivery or open report from a device.
type ReportEvent struct {
	InstanceID            string
	PublishID             string
	DeviceID              string
	Kind                  ReportKind
	UserID                string // "" when not sent
	TimestampSecs         int64  // when it happened, by the device's clock
	AppInBackground       *bool  // delivery only; nil when not sent
	HasDisplayableContent *bool  // delivery only; nil when not sent
	HasData               *bool  // delivery only; nil when not sent
}

// RecordReportEvent stores the event and counts it for its publish, when the
// report is honest: the publish exists on the instance and the device was
// one of its targets. It returns whether the event was counted. It is not
// counted, without an error, when
//   - there is no such publish on the instance;
//   - the device is not on the instance (any more), or was registered after
//     the publish finished, so no page of it could have reached the device;
//   - the device has none of the publish's interests, or is not bound to one
//     of its users, now;
//   - the device already reported this kind for this publish (SDKs retry).
//
// Deliveries are recorded per page, not per device, so "was a target" is
// judged by the device's interests and user at the time of the report. A
// device that left the interest (or its user) after the notification reached
// it is not counted; one that joined an interest after the publish, before
// it finished, is. Both are rare, and neither lets a client count more than
// once per real device and kind.
func (db *DB) RecordReportEvent(ctx context.Context, ev ReportEvent) (bool, error) {
	var recorded bool
	// Without the write lock on PostgreSQL: the unique key of report_events
	// counts each (device, kind) once and the count is an upsert.
	err := db.writeRows(ctx, func(tx *tx) error {
		// One statement checks and inserts: the publish and device are
		// primary-key lookups, the interests at most one index probe per
		// interest of the publish (100 at most).
		// The casts give PostgreSQL the types of the selected arguments.
		res, err := tx.ExecContext(ctx, `INSERT INTO report_events (instance_id, publish_id, device_id, event, user_id,
				timestamp_secs, app_in_background, has_displayable_content, has_data, received_at_ms)
			SELECT ?1, ?2, ?3, ?4, ?5, CAST(?6 AS BIGINT), CAST(?7 AS BIGINT), CAST(?8 AS BIGINT), CAST(?9 AS BIGINT), CAST(?10 AS BIGINT)
			FROM publishes p JOIN devices d ON d.id = ?3 AND d.instance_id = p.instance_id
			WHERE p.id = ?2 AND p.instance_id = ?1
				AND d.created_at_ms <= COALESCE(p.finished_at_ms, ?10)
				AND CASE p.target_kind
					WHEN 'users' THEN d.user_id IN (SELECT u.value FROM `+db.d.eachJSON("p.targets", "u")+`)
					ELSE EXISTS (SELECT 1 FROM `+db.d.eachJSON("p.targets", "t")+` JOIN device_interests di
						ON di.instance_id = p.instance_id AND di.interest = t.value AND di.device_id = d.id)
				END
			ON CONFLICT DO NOTHING`,
			ev.InstanceID, ev.PublishID, ev.DeviceID, string(ev.Kind), ev.UserID, ev.TimestampSecs,
			nullBool(ev.AppInBackground), nullBool(ev.HasDisplayableContent), nullBool(ev.HasData), now().UnixMilli())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil || n == 0 {
			return err
		}
		recorded = true
		var delivered, opened int
		if ev.Kind == ReportOpen {
			opened = 1
		} else {
			delivered = 1
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO publish_report_counts (instance_id, publish_id, delivered, opened)
			VALUES (?, ?, ?, ?)
			ON CONFLICT (instance_id, publish_id) DO UPDATE SET delivered = publish_report_counts.delivered + excluded.delivered,
				opened = publish_report_counts.opened + excluded.opened`,
			ev.InstanceID, ev.PublishID, delivered, opened)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("record %s report for publish %q: %w", ev.Kind, ev.PublishID, err)
	}
	return recorded, nil
}

// PublishReportCounts returns how many devices reported the publish delivered
// and opened. A publish nobody reported on has zero of each.
func (db *DB) PublishReportCounts(ctx context.Context, instanceID, publishID string) (delivered, opened int, err error) {
	err = db.reader.QueryRowContext(ctx, `SELECT delivered, opened FROM publish_report_counts
		WHERE instance_id = ? AND publish_id = ?`, instanceID, publishID).Scan(&delivered, &opened)
	if err == sql.ErrNoRows {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("report counts of publish %q: %w", publishID, err)
	}
	return delivered, opened, nil
}

// DeviceReportCounts returns how many publishes the device reported delivered
// and opened.
func (db *DB) DeviceReportCounts(ctx context.Context, instanceID, deviceID string) (delivered, opened int, err error) {
	err = db.reader.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM report_events WHERE instance_id = ?1 AND device_id = ?2 AND event = 'delivery'),
			(SELECT COUNT(*) FROM report_events WHERE instance_id = ?1 AND device_id = ?2 AND event = 'open')`,
		instanceID, deviceID).Scan(&delivered, &opened)
	if err != nil {
		return 0, 0, fmt.Errorf("report counts of device %q: %w", deviceID, err)
	}
	return delivered, opened, nil
}

func nullBool(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}
