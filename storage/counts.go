package storage

import (
	"context"
	"fmt"
)

// CountDevices is the number of devices registered on an instance.
func (db *DB) CountDevices(ctx context.Context, instanceID string) (int, error) {
	var n int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM devices WHERE instance_id = ?`, instanceID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count devices of %s: %w", instanceID, err)
	}
	return n, nil
}
