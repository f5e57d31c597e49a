package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Instance is a Push (Beams) instance.
type Instance struct {
	ID           string      // UUID
	SecretKey    string      // authenticates publishes and signs user JWTs
	JWTIssuer    string      // optional extra accepted issuer
	Enabled      bool        // a disabled instance refuses every API call
	APNs         APNsConfig  // Apple Push Notification service credentials
	FCM          FCMConfig   // Firebase Cloud Messaging credentials
	VAPID        VAPIDConfig // Web Push keys
	PublishQuota int         // publishes allowed per day; 0 = off
	CreatedAt    time.Time   // set by CreateInstance
	UpdatedAt    time.Time   // set by CreateInstance and UpdateInstance
}

// APNsConfig holds an instance's APNs credentials; empty fields mean APNs is
// not configured.
type APNsConfig struct {
	KeyPEM string // .p8 signing key contents
	KeyID  string // key id of KeyPEM
	TeamID string // Apple developer team id
	Topic  string // bundle id sent as apns-topic
	URL    string // gateway base URL override; empty = https://api.push.apple.com
	CAPEM  string // extra CA certificates to trust for URL, PEM
}

// FCMConfig holds an instance's Firebase Cloud Messaging credentials.
type FCMConfig struct {
	ServiceAccountJSON string // service account key file contents
	URL                string // gateway base URL override; empty = https://fcm.googleapis.com
}

// VAPIDConfig holds an instance's Web Push (VAPID) key pair and subject.
type VAPIDConfig struct {
	PublicKey  string // base64url, as web push libraries use
	PrivateKey string // base64url
	Subject    string // mailto: or https: URI sent in the VAPID token
}

// instanceColumns lists the instances columns in the order scanInstance reads them.
const instanceColumns = `id, secret_key, jwt_issuer, enabled,
	apns_key_pem, apns_key_id, apns_team_id, apns_topic, apns_url, apns_ca_pem,
	fcm_service_account_json, fcm_url, vapid_public_key, vapid_private_key, vapid_subject,
	publish_quota, created_at_ms, updated_at_ms`

// CreateInstance stores a new instance and returns it with timestamps set. It
// returns ErrConflict when the id is taken.
func (db *DB) CreateInstance(ctx context.Context, in Instance) (Instance, error) {
	in.CreatedAt = now()
	in.UpdatedAt = in.CreatedAt
	_, err := db.writer.ExecContext(ctx, `INSERT INTO instances (`+instanceColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		in.ID, in.SecretKey, in.JWTIssuer, in.Enabled,
		in.APNs.KeyPEM, in.APNs.KeyID, in.APNs.TeamID, in.APNs.Topic, in.APNs.URL, in.APNs.CAPEM,
		in.FCM.ServiceAccountJSON, in.FCM.URL, in.VAPID.PublicKey, in.VAPID.PrivateKey, in.VAPID.Subject,
		in.PublishQuota, in.CreatedAt.UnixMilli(), in.UpdatedAt.UnixMilli())
	if err != nil {
		return Instance{}, fmt.Errorf("create instance %q: %w", in.ID, conflict(err))
	}
	return in, nil
}

// GetInstance returns the instance with the given id, or ErrNotFound.
func (db *DB) GetInstance(ctx context.Context, id string) (Instance, error) {
	row := db.reader.QueryRowContext(ctx, `SELECT `+instanceColumns+` FROM instances WHERE id = ?`, id)
	in, err := scanInstance(row)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return Instance{}, fmt.Errorf("get instance %q: %w", id, err)
	}
	return in, nil
}

// ListInstances returns every instance, ordered by id.
func (db *DB) ListInstances(ctx context.Context) ([]Instance, error) {
	rows, err := db.reader.QueryContext(ctx, `SELECT `+instanceColumns+` FROM instances ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	defer rows.Close()
	var instances []Instance
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("list instances: %w", err)
		}
		instances = append(instances, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	return instances, nil
}

// UpdateInstance replaces every field of the stored instance with the same
// ID, except CreatedAt. It returns ErrNotFound when there is no such instance.
func (db *DB) UpdateInstance(ctx context.Context, in Instance) error {
	res, err := db.writer.ExecContext(ctx, `UPDATE instances SET secret_key = ?, jwt_issuer = ?, enabled = ?,
		apns_key_pem = ?, apns_key_id = ?, apns_team_id = ?, apns_topic = ?, apns_url = ?, apns_ca_pem = ?,
		fcm_service_account_json = ?, fcm_url = ?, vapid_public_key = ?, vapid_private_key = ?, vapid_subject = ?,
		publish_quota = ?, updated_at_ms = ?
		WHERE id = ?`,
		in.SecretKey, in.JWTIssuer, in.Enabled,
		in.APNs.KeyPEM, in.APNs.KeyID, in.APNs.TeamID, in.APNs.Topic, in.APNs.URL, in.APNs.CAPEM,
		in.FCM.ServiceAccountJSON, in.FCM.URL, in.VAPID.PublicKey, in.VAPID.PrivateKey, in.VAPID.Subject,
		in.PublishQuota, now().UnixMilli(), in.ID)
	if err == nil {
		err = rowsAffected(res)
	}
	if err != nil {
		return fmt.Errorf("update instance %q: %w", in.ID, err)
	}
	return nil
}

// DeleteInstance deletes the instance with the given id, or returns ErrNotFound.
func (db *DB) DeleteInstance(ctx context.Context, id string) error {
	res, err := db.writer.ExecContext(ctx, `DELETE FROM instances WHERE id = ?`, id)
	if err == nil {
		err = rowsAffected(res)
	}
	if err != nil {
		return fmt.Errorf("delete instance %q: %w", id, err)
	}
	return nil
}

// CountInstances returns the number of instances.
func (db *DB) CountInstances(ctx context.Context) (int, error) {
	var n int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM instances`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count instances: %w", err)
	}
	return n, nil
}

func scanInstance(s scanner) (Instance, error) {
	var in Instance
	var createdMS, updatedMS int64
	err := s.Scan(&in.ID, &in.SecretKey, &in.JWTIssuer, &in.Enabled,
		&in.APNs.KeyPEM, &in.APNs.KeyID, &in.APNs.TeamID, &in.APNs.Topic, &in.APNs.URL, &in.APNs.CAPEM,
		&in.FCM.ServiceAccountJSON, &in.FCM.URL, &in.VAPID.PublicKey, &in.VAPID.PrivateKey, &in.VAPID.Subject,
		&in.PublishQuota, &createdMS, &updatedMS)
	if err != nil {
		return Instance{}, err
	}
	in.CreatedAt = fromMillis(createdMS)
	in.UpdatedAt = fromMillis(updatedMS)
	return in, nil
}
