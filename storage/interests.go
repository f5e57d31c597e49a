package storage

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DeviceInterests returns up to limit of the device's interests that sort
// after `after` ("" = from the start), in name order, and whether more
// remain. It returns ErrNotFound when there is no such device.
func (db *DB) DeviceInterests(ctx context.Context, instanceID string, p Platform, id, after string, limit int) ([]string, bool, error) {
	var interests []string
	var more bool
	err := db.read(ctx, func(tx *tx) error {
		if err := deviceExistsTx(ctx, tx, instanceID, p, id); err != nil {
			return err
		}
		var err error
		// One more than asked tells whether another page exists.
		interests, err = deviceInterestsTx(ctx, tx, id, after, limit+1)
		if len(interests) > limit {
			interests, more = interests[:limit], true
		}
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("interests of device %q: %w", id, err)
	}
	return interests, more, nil
}

// deviceInterestsTx reads a device's interests after `after`, in name order,
// from the device_interests_device index alone.
func deviceInterestsTx(ctx context.Context, tx *tx, id, after string, limit int) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT interest FROM device_interests
		WHERE device_id = ? AND interest > ? ORDER BY interest LIMIT ?`, id, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// SetDeviceInterests replaces the device's interests with the given set
// (duplicates count once). It returns ErrNotFound for no such device and
// ErrInterestLimit for more than MaxDeviceInterests distinct interests.
func (db *DB) SetDeviceInterests(ctx context.Context, instanceID string, p Platform, id string, interests []string) error {
	set := uniqueSorted(interests)
	if len(set) > MaxDeviceInterests {
		return fmt.Errorf("set interests of device %q: %w", id, ErrInterestLimit)
	}
	err := db.writeRows(ctx, func(tx *tx) error {
		if err := lockDeviceTx(ctx, tx, instanceID, p, id); err != nil {
			return err
		}
		// Only the difference is written: SDKs send the whole set on every
		// change and it is usually the stored one plus or minus one.
		current, err := deviceInterestsTx(ctx, tx, id, "", MaxDeviceInterests+1)
		if err != nil {
			return err
		}
		del, err := tx.PrepareContext(ctx, `DELETE FROM device_interests WHERE instance_id = ? AND interest = ? AND device_id = ?`)
		if err != nil {
			return err
		}
		defer del.Close()
		for _, s := range current {
			if _, keep := slices.BinarySearch(set, s); !keep {
				if _, err := del.ExecContext(ctx, instanceID, s, id); err != nil {
					return err
				}
			}
		}
		ins, err := tx.PrepareContext(ctx, `INSERT INTO device_interests (instance_id, interest, device_id) VALUES (?, ?, ?)
			ON CONFLICT DO NOTHING`)
		if err != nil {
			return err
		}
		defer ins.Close()
		for _, s := range set {
			if _, had := slices.BinarySearch(current, s); !had {
				if _, err := ins.ExecContext(ctx, instanceID, s, id); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("set interests of device %q: %w", id, err)
	}
	return nil
}

// AddDeviceInterest subscribes the device to the interest; already being
// subscribed is fine. It returns ErrNotFound for no such device and
// ErrInterestLimit when the device already holds MaxDeviceInterests others.
func (db *DB) AddDeviceInterest(ctx context.Context, instanceID string, p Platform, id, interest string) error {
	err := db.writeRows(ctx, func(tx *tx) error {
		if err := lockDeviceTx(ctx, tx, instanceID, p, id); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO device_interests (instance_id, interest, device_id) VALUES (?, ?, ?)
			ON CONFLICT DO NOTHING`, instanceID, interest, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // already subscribed
		}
		var count int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM device_interests WHERE device_id = ?`, id).Scan(&count); err != nil {
			return err
		}
		if count > MaxDeviceInterests {
			return ErrInterestLimit // rolls the insert back
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("add interest to device %q: %w", id, err)
	}
	return nil
}

// RemoveDeviceInterest unsubscribes the device from the interest; not being
// subscribed is fine. It returns ErrNotFound for no such device.
func (db *DB) RemoveDeviceInterest(ctx context.Context, instanceID string, p Platform, id, interest string) error {
	err := db.writeRows(ctx, func(tx *tx) error {
		if err := lockDeviceTx(ctx, tx, instanceID, p, id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM device_interests WHERE instance_id = ? AND interest = ? AND device_id = ?`,
			instanceID, interest, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("remove interest from device %q: %w", id, err)
	}
	return nil
}

// CountInterestSubscribers returns how many devices of the instance are
// subscribed to the interest.
func (db *DB) CountInterestSubscribers(ctx context.Context, instanceID, interest string) (int, error) {
	var n int
	err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM device_interests WHERE instance_id = ? AND interest = ?`,
		instanceID, interest).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count subscribers of %q: %w", interest, err)
	}
	return n, nil
}

// DeviceImport is one device to store with ImportDevices.
type DeviceImport struct {
	Device    Device   // ID, InstanceID, Platform and Token are required
	Interests []string // its interests
}

// ImportDevices stores many devices and their interests in one transaction,
// for migrations from another service and for building large test data sets.
// Devices are inserted as given (no token deduplication; ids start with their
// platform and a dash); a taken id or token gives ErrConflict and stores
// nothing.
func (db *DB) ImportDevices(ctx context.Context, devices []DeviceImport) error {
	if db.d.postgres {
		return db.importDevicesCopy(ctx, devices)
	}
	err := db.write(ctx, func(tx *tx) error {
		dev, err := tx.PrepareContext(ctx, `INSERT INTO devices (`+deviceColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer dev.Close()
		ins, err := tx.PrepareContext(ctx, `INSERT INTO device_interests (instance_id, interest, device_id) VALUES (?, ?, ?)
			ON CONFLICT DO NOTHING`)
		if err != nil {
			return err
		}
		defer ins.Close()
		ts := now().UnixMilli()
		for _, di := range devices {
			d := di.Device
			if err := checkDeviceID(d); err != nil {
				return err
			}
			md, err := encodeMetadata(d.Metadata)
			if err != nil {
				return err
			}
			var user any
			if d.UserID != "" {
				user = d.UserID
			}
			if _, err := dev.ExecContext(ctx, d.ID, d.InstanceID, string(d.Platform), d.Token, d.BundleIdentifier, md, user, ts, ts); err != nil {
				return conflict(err)
			}
			for _, s := range di.Interests {
				if _, err := ins.ExecContext(ctx, d.InstanceID, s, d.ID); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("import devices: %w", err)
	}
	return nil
}

// importDevicesCopy is ImportDevices on PostgreSQL: the devices and their
// interests streamed with COPY, several times faster than row by row.
func (db *DB) importDevicesCopy(ctx context.Context, devices []DeviceImport) error {
	ts := now().UnixMilli()
	devRows := make([][]any, 0, len(devices))
	var interestRows [][]any
	for _, di := range devices {
		d := di.Device
		if err := checkDeviceID(d); err != nil {
			return fmt.Errorf("import devices: %w", err)
		}
		md, err := encodeMetadata(d.Metadata)
		if err != nil {
			return fmt.Errorf("import devices: %w", err)
		}
		var user any
		if d.UserID != "" {
			user = d.UserID
		}
		row := []any{d.ID, d.InstanceID, string(d.Platform), d.Token, d.BundleIdentifier, md, user, ts, ts}
		if checkText(row) != nil || slices.ContainsFunc(di.Interests, func(s string) bool { return strings.IndexByte(s, 0) >= 0 }) {
			// Refused before COPY, as every write refuses it (COPY's
			// own refusal would name no row).
			return fmt.Errorf("import devices: %w", ErrInvalidText)
		}
		devRows = append(devRows, row)
		for _, s := range uniqueSorted(di.Interests) { // COPY has no ON CONFLICT
			interestRows = append(interestRows, []any{d.InstanceID, s, d.ID})
		}
	}
	err := db.pgxWrite(ctx, func(t pgx.Tx) error {
		if _, err := t.CopyFrom(ctx, pgx.Identifier{"devices"}, strings.Split(strings.ReplaceAll(deviceColumns, " ", ""), ","),
			pgx.CopyFromRows(devRows)); err != nil {
			return conflict(err)
		}
		_, err := t.CopyFrom(ctx, pgx.Identifier{"device_interests"}, []string{"instance_id", "interest", "device_id"},
			pgx.CopyFromRows(interestRows))
		return err
	})
	if err != nil {
		return fmt.Errorf("import devices: %w", err)
	}
	return nil
}

// uniqueSorted returns the distinct values of s, sorted, in a new slice.
func uniqueSorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}
