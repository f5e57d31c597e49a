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

// RecordReportEvent stores the event and counts it for its publish. A second
// report of the same kind by the same device for the same publish is ignored
// (SDKs retry); it returns whether this one was new.
func (db *DB) RecordReportEvent(ctx context.Context, ev ReportEvent) (bool, error) {
	var recorded bool
	err := db.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO report_events (instance_id, publish_id, device_id, event, user_id,
			timestamp_secs, app_in_background, has_displayable_content, has_data, received_at_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
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
			ON CONFLICT (instance_id, publish_id) DO UPDATE SET delivered = delivered + excluded.delivered, opened = opened + excluded.opened`,
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
