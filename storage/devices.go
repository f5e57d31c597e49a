package storage

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Limits the storage enforces for devices (the Device API states the same).
const (
	// MaxDeviceInterests is the most interests one device may hold.
	MaxDeviceInterests = 5000
	// MaxUserDevices is the most devices one user may have on an instance.
	MaxUserDevices = 100
)

var (
	// ErrUserAlreadySet means the device is already bound to another user.
	ErrUserAlreadySet = errors.New("storage: device already bound to another user")
	// ErrUserDeviceLimit means the user already has MaxUserDevices devices.
	ErrUserDeviceLimit = errors.New("storage: user has the maximum number of devices")
	// ErrInterestLimit means the device would hold more than MaxDeviceInterests interests.
	ErrInterestLimit = errors.New("storage: device has the maximum number of interests")
)

// Platform is a device's push gateway.
type Platform string

// The gateways a device can belong to.
const (
	PlatformAPNs Platform = "apns" // Apple Push Notification service
	PlatformFCM  Platform = "fcm"  // Firebase Cloud Messaging
	PlatformWeb  Platform = "web"  // Web Push
)

// Valid reports whether p is one of the known platforms.
func (p Platform) Valid() bool {
	return p == PlatformAPNs || p == PlatformFCM || p == PlatformWeb
}

// Device is an app install registered with a Push instance.
type Device struct {
	ID               string            // assigned by RegisterDevice
	InstanceID       string            // the instance it belongs to
	Platform         Platform          // its gateway
	Token            string            // the gateway token; unique per instance and platform
	BundleIdentifier string            // apns: the app's bundle id; fcm: optional package name
	Metadata         map[string]string // what the SDK reports (sdkVersion, iosVersion, …); never nil when read
	UserID           string            // the bound user; "" when none
	CreatedAt        time.Time         // set by RegisterDevice
	UpdatedAt        time.Time         // set by every change of the device row
}

// deviceColumns lists the devices columns in the order scanDevice reads them.
const deviceColumns = `id, instance_id, platform, token, bundle_identifier, metadata, user_id, created_at_ms, updated_at_ms`

// NewDeviceID returns a fresh device identifier: the platform and a random
// UUID, so an id says where the device lives when it shows up in a log.
// Every stored device id starts with its platform and a dash (as Beams ids
// do): a platform's devices are then one range of an interest's index.
func NewDeviceID(p Platform) string {
	return string(p) + "-" + uuid.Must(uuid.NewRandomFromReader(rand.Reader)).String()
}

// checkDeviceID refuses a given device id that does not start with the
// device's platform and a dash.
func checkDeviceID(d Device) error {
	if !strings.HasPrefix(d.ID, string(d.Platform)+"-") {
		return fmt.Errorf("device id %q does not start with %q", d.ID, string(d.Platform)+"-")
	}
	return nil
}

// RegisterDevice stores d as a new device, or, when the instance already has
// a device with the same platform and token, updates that device's bundle
// identifier and metadata instead of creating a twin. It returns the stored
// device and its current interests (none for a new device). d.ID is used for
// a new device when set (it must start with the platform and a dash);
// otherwise a fresh one is made.
func (db *DB) RegisterDevice(ctx context.Context, d Device) (Device, []string, error) {
	if d.ID != "" {
		if err := checkDeviceID(d); err != nil {
			return Device{}, nil, err
		}
	}
	md, err := encodeMetadata(d.Metadata)
	if err != nil {
		return Device{}, nil, err
	}
	var interests []string
	err = db.writeRows(ctx, func(tx *tx) error {
		ts := now()
		// update reports whether the instance has a device with the token,
		// made d once updated.
		update := func() (bool, error) {
			row := tx.QueryRowContext(ctx, `UPDATE devices SET bundle_identifier = ?, metadata = ?, updated_at_ms = ?
				WHERE instance_id = ? AND platform = ? AND token = ?
				RETURNING `+deviceColumns,
				d.BundleIdentifier, md, ts.UnixMilli(), d.InstanceID, string(d.Platform), d.Token)
			existing, err := scanDevice(row)
			if errors.Is(err, sql.ErrNoRows) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			d = existing
			interests, err = deviceInterestsTx(ctx, tx, d.ID, "", MaxDeviceInterests)
			return true, err
		}
		if found, err := update(); found || err != nil {
			return err
		}
		if d.ID == "" {
			d.ID = NewDeviceID(d.Platform)
		}
		d.CreatedAt, d.UpdatedAt, d.UserID = ts, ts, ""
		d.Metadata = decodeMetadata(md)
		res, err := tx.ExecContext(ctx, `INSERT INTO devices (`+deviceColumns+`) VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?)
			ON CONFLICT (instance_id, platform, token) DO NOTHING`,
			d.ID, d.InstanceID, string(d.Platform), d.Token, d.BundleIdentifier, md, ts.UnixMilli(), ts.UnixMilli())
		if err != nil {
			return conflict(err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		// Another request registered the token meanwhile (PostgreSQL, where
		// registrations run side by side): this one updates that device.
		if found, err := update(); found || err != nil {
			return err
		}
		return ErrConflict
	})
	if err != nil {
		return Device{}, nil, fmt.Errorf("register device on instance %q: %w", d.InstanceID, err)
	}
	if interests == nil {
		interests = []string{}
	}
	return d, interests, nil
}

// GetDevice returns the device with the id, platform and instance, or ErrNotFound.
func (db *DB) GetDevice(ctx context.Context, instanceID string, p Platform, id string) (Device, error) {
	row := db.reader.QueryRowContext(ctx, `SELECT `+deviceColumns+` FROM devices
		WHERE id = ? AND instance_id = ? AND platform = ?`, id, instanceID, string(p))
	d, err := scanDevice(row)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Device{}, fmt.Errorf("get device %q: %w", id, err)
	}
	return d, nil
}

// DeleteDevice deletes the device with its interests, or returns ErrNotFound.
func (db *DB) DeleteDevice(ctx context.Context, instanceID string, p Platform, id string) error {
	res, err := db.writer.ExecContext(ctx, `DELETE FROM devices WHERE id = ? AND instance_id = ? AND platform = ?`,
		id, instanceID, string(p))
	if err == nil {
		err = rowsAffected(res)
	}
	if err != nil {
		return fmt.Errorf("delete device %q: %w", id, err)
	}
	return nil
}

// UpdateDeviceMetadata replaces the device's metadata, or returns ErrNotFound.
func (db *DB) UpdateDeviceMetadata(ctx context.Context, instanceID string, p Platform, id string, md map[string]string) error {
	enc, err := encodeMetadata(md)
	if err != nil {
		return err
	}
	res, err := db.writer.ExecContext(ctx, `UPDATE devices SET metadata = ?, updated_at_ms = ?
		WHERE id = ? AND instance_id = ? AND platform = ?`, enc, now().UnixMilli(), id, instanceID, string(p))
	if err == nil {
		err = rowsAffected(res)
	}
	if err != nil {
		return fmt.Errorf("update metadata of device %q: %w", id, err)
	}
	return nil
}

// UpdateDeviceToken replaces the device's gateway token, or returns
// ErrNotFound. Another device of the instance holding the same token is
// deleted: a token reaches exactly one install, so that device is a stale
// registration of it.
func (db *DB) UpdateDeviceToken(ctx context.Context, instanceID string, p Platform, id, token string) error {
	err := db.write(ctx, func(tx *tx) error {
		if err := deviceExistsTx(ctx, tx, instanceID, p, id); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM devices WHERE instance_id = ? AND platform = ? AND token = ? AND id <> ?`,
			instanceID, string(p), token, id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE devices SET token = ?, updated_at_ms = ? WHERE id = ?`, token, now().UnixMilli(), id)
		return err
	})
	if err != nil {
		return fmt.Errorf("update token of device %q: %w", id, err)
	}
	return nil
}

// SetDeviceUser binds the device to userID. Binding it to the user it already
// has succeeds. It returns ErrNotFound for no such device, ErrUserAlreadySet
// when the device has another user, and ErrUserDeviceLimit when the user
// already has MaxUserDevices devices.
func (db *DB) SetDeviceUser(ctx context.Context, instanceID string, p Platform, id, userID string) error {
	err := db.writeRows(ctx, func(tx *tx) error {
		if err := lockDeviceTx(ctx, tx, instanceID, p, id); err != nil {
			return err
		}
		if tx.d.postgres {
			// Bindings to one user go one at a time, so that two devices
			// of a user at the limit cannot both slip in; other users'
			// side by side. (Two-key advisory locks are apart from the
			// write lock's one key.)
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext(?), hashtext(?))`, instanceID, userID); err != nil {
				return err
			}
		}
		var current sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT user_id FROM devices WHERE id = ? AND instance_id = ? AND platform = ?`,
			id, instanceID, string(p)).Scan(&current)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrNotFound
		case err != nil:
			return err
		case current.Valid && current.String == userID:
			return nil
		case current.Valid:
			return ErrUserAlreadySet
		}
		// Counted under the user's lock (the one writer on SQLite).
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM devices WHERE instance_id = ? AND user_id = ?`,
			instanceID, userID).Scan(&n); err != nil {
			return err
		}
		if n >= MaxUserDevices {
			return ErrUserDeviceLimit
		}
		_, err = tx.ExecContext(ctx, `UPDATE devices SET user_id = ?, updated_at_ms = ? WHERE id = ?`, userID, now().UnixMilli(), id)
		return err
	})
	if err != nil {
		return fmt.Errorf("set user of device %q: %w", id, err)
	}
	return nil
}

// UserDevices returns every device of the users on the instance (at most
// MaxUserDevices each), ordered by user and device id.
func (db *DB) UserDevices(ctx context.Context, instanceID string, users []string) ([]Device, error) {
	var out []Device
	err := db.read(ctx, func(tx *tx) error {
		var err error
		out, err = userDevicesTx(ctx, tx, instanceID, users)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("devices of users on instance %q: %w", instanceID, err)
	}
	return out, nil
}

// userDevicesTx is UserDevices in tx.
func userDevicesTx(ctx context.Context, tx *tx, instanceID string, users []string) ([]Device, error) {
	var out []Device
	stmt, err := tx.PrepareContext(ctx, `SELECT `+deviceColumns+` FROM devices
		WHERE instance_id = ? AND user_id = ? ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer stmt.Close()
	for _, u := range uniqueSorted(users) {
		rows, err := stmt.QueryContext(ctx, instanceID, u)
		if err != nil {
			return nil, err
		}
		if out, err = appendDevices(out, rows); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DeleteUser deletes every device bound to the user on the instance and
// returns how many there were.
func (db *DB) DeleteUser(ctx context.Context, instanceID, userID string) (int, error) {
	res, err := db.writer.ExecContext(ctx, `DELETE FROM devices WHERE instance_id = ? AND user_id = ?`, instanceID, userID)
	if err != nil {
		return 0, fmt.Errorf("delete user %q: %w", userID, err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// deviceExistsTx returns ErrNotFound unless the device exists.
func deviceExistsTx(ctx context.Context, tx *tx, instanceID string, p Platform, id string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM devices WHERE id = ? AND instance_id = ? AND platform = ?`,
		id, instanceID, string(p)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// lockDeviceTx is deviceExistsTx that, on PostgreSQL, also locks the
// device's row until tx ends: the read-then-write changes of one device
// (its interests and their limit, its user) go one at a time, those of
// other devices side by side (see writeRows). FOR NO KEY UPDATE leaves the
// foreign-key checks of other rows referencing the device free. On SQLite
// the one writer does it.
func lockDeviceTx(ctx context.Context, tx *tx, instanceID string, p Platform, id string) error {
	if !tx.d.postgres {
		return deviceExistsTx(ctx, tx, instanceID, p, id)
	}
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM devices WHERE id = ? AND instance_id = ? AND platform = ? FOR NO KEY UPDATE`,
		id, instanceID, string(p)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

func encodeMetadata(md map[string]string) (string, error) {
	if md == nil {
		return "{}", nil
	}
	b, err := json.Marshal(md)
	if err != nil {
		return "", fmt.Errorf("encode device metadata: %w", err)
	}
	return string(b), CheckJSON(b)
}

func decodeMetadata(s string) map[string]string {
	md := map[string]string{}
	// The column is checked to be a JSON object on write, and only
	// encodeMetadata writes it, so the values are strings.
	_ = json.Unmarshal([]byte(s), &md)
	return md
}

func scanDevice(s scanner) (Device, error) {
	var d Device
	var platform, md string
	var user sql.NullString
	var createdMS, updatedMS int64
	if err := s.Scan(&d.ID, &d.InstanceID, &platform, &d.Token, &d.BundleIdentifier, &md, &user, &createdMS, &updatedMS); err != nil {
		return Device{}, err
	}
	d.Platform = Platform(platform)
	d.Metadata = decodeMetadata(md)
	d.UserID = user.String
	d.CreatedAt = fromMillis(createdMS)
	d.UpdatedAt = fromMillis(updatedMS)
	return d, nil
}

// appendDevices scans every row into out and closes rows.
func appendDevices(out []Device, rows *sql.Rows) ([]Device, error) {
	defer rows.Close()
	for rows.Next() {
		d, err := scanDevice(rows)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
