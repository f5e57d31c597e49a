package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Defaults applied by CreateApp and UpdateApp to limits left at zero.
const (
	// DefaultMaxPresenceMembers is the default App.MaxPresenceMembers.
	DefaultMaxPresenceMembers = 100
	// DefaultMaxPresenceUserInfoBytes is the default App.MaxPresenceUserInfoBytes.
	DefaultMaxPresenceUserInfoBytes = 1024
	// DefaultHistoryTTL is the App.HistoryTTL of an app that keeps history
	// but gave no age limit.
	DefaultHistoryTTL = time.Hour
	// DefaultRecoveryWindow is the App.RecoveryWindow of an app that set
	// none: how long a connection that dropped may take to come back and
	// still get what it missed.
	DefaultRecoveryWindow = 2 * time.Minute
	// RecoveryOff is the App.RecoveryWindow of an app that recovers nothing.
	RecoveryOff = -time.Millisecond
)

// App is a Channels application.
type App struct {
	ID                string        // path app_id, e.g. "1234"
	Key               string        // public key, unique
	Secret            string        // signs HTTP API requests and channel authorizations
	Enabled           bool          // a disabled app refuses connections and API calls
	ClientEvents      bool          // client-* events allowed
	SubscriptionCount bool          // subscription_count info + events enabled
	UserAuthTimeout   time.Duration // 0 = off; close connections that neither sign in nor subscribe to an authorized channel in time; stored in whole milliseconds
	MaxConnections    int           // 0 = unlimited
	// MaxPresenceMembers is the member limit of one presence channel;
	// 0 is stored as DefaultMaxPresenceMembers.
	MaxPresenceMembers int
	// MaxPresenceUserInfoBytes is the size limit of a presence member's
	// user_info; 0 is stored as DefaultMaxPresenceUserInfoBytes.
	MaxPresenceUserInfoBytes int
	// HistoryEvents is how many of the last events of each channel are
	// kept for the history API; 0 (the default) keeps none.
	HistoryEvents int
	// HistoryTTL is the age past which a kept event is forgotten; 0 is
	// stored as DefaultHistoryTTL when HistoryEvents is set. Whole
	// milliseconds.
	HistoryTTL time.Duration
	// RecoveryWindow is how long after losing its connection a client may
	// come back and get what it missed on its channels, for an app that
	// keeps history; 0 is stored as DefaultRecoveryWindow, RecoveryOff
	// turns it off. Whole milliseconds.
	RecoveryWindow time.Duration
	// PushInstance is the id of the Push instance the app is linked to,
	// which a trigger's push_if_offline publishes through; empty when
	// none. It must name an existing instance (ErrUnknownInstance); when
	// that instance is deleted, the link goes with it.
	PushInstance string
	Webhooks     []Webhook // in the order given when the app was last created or updated
	CreatedAt    time.Time // set by CreateApp
	UpdatedAt    time.Time // set by CreateApp and UpdateApp
}

// Webhook is one webhook endpoint of an app.
type Webhook struct {
	ID            int64    // assigned when stored; UpdateApp assigns new ones
	URL           string   // where events are POSTed
	EventTypes    []string // empty = every kind (channel_occupied, channel_vacated, member_added, member_removed, client_event, cache_miss, subscription_count)
	ChannelPrefix string   // empty = every channel
	Batch         bool     // send several events per POST
}

// Takes reports whether the endpoint wants events of kind (one of the
// EventTypes names) on channel: the channel has its prefix, and the kind is
// among its event types or it lists none. The webhook sender and the
// WebSocket transport's subscribe limit both ask it.
func (w Webhook) Takes(kind, channel string) bool {
	if w.ChannelPrefix != "" && !strings.HasPrefix(channel, w.ChannelPrefix) {
		return false
	}
	return len(w.EventTypes) == 0 || slices.Contains(w.EventTypes, kind)
}

// appColumns lists the apps columns in the order scanApp reads them.
const appColumns = `id, key, secret, enabled, client_events, subscription_count, user_auth_timeout_ms,
	max_connections, max_presence_members, max_presence_user_info_bytes, history_events, history_ttl_ms, recovery_window_ms, push_instance, created_at_ms, updated_at_ms`

// CreateApp stores a new app and its webhooks and returns it as stored, with
// timestamps, defaults and webhook IDs filled in. It returns ErrConflict when
// the id or the key is taken.
func (db *DB) CreateApp(ctx context.Context, app App) (App, error) {
	app = app.withDefaults()
	app.CreatedAt = now()
	app.UpdatedAt = app.CreatedAt
	err := db.write(ctx, func(tx *tx) error {
		if err := checkPushInstance(ctx, tx, app.PushInstance); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO apps (`+appColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			app.ID, app.Key, app.Secret, app.Enabled, app.ClientEvents, app.SubscriptionCount,
			app.UserAuthTimeout.Milliseconds(), app.MaxConnections, app.MaxPresenceMembers,
			app.MaxPresenceUserInfoBytes, app.HistoryEvents, app.HistoryTTL.Milliseconds(), app.RecoveryWindow.Milliseconds(), nullable(app.PushInstance),
			app.CreatedAt.UnixMilli(), app.UpdatedAt.UnixMilli())
		if err != nil {
			return conflict(err)
		}
		app.Webhooks, err = insertWebhooks(ctx, tx, app.ID, app.Webhooks)
		return err
	})
	if err != nil {
		return App{}, fmt.Errorf("create app %q: %w", app.ID, err)
	}
	return app, nil
}

// GetApp returns the app with the given id, or ErrNotFound.
func (db *DB) GetApp(ctx context.Context, id string) (App, error) {
	app, err := db.getApp(ctx, "id", id)
	if err != nil {
		return App{}, fmt.Errorf("get app %q: %w", id, err)
	}
	return app, nil
}

// GetAppByKey returns the app with the given public key, or ErrNotFound.
func (db *DB) GetAppByKey(ctx context.Context, key string) (App, error) {
	app, err := db.getApp(ctx, "key", key)
	if err != nil {
		return App{}, fmt.Errorf("get app by key %q: %w", key, err)
	}
	return app, nil
}

// getApp reads the app whose column (a constant, never user input) equals
// value, with its webhooks.
func (db *DB) getApp(ctx context.Context, column, value string) (App, error) {
	var app App
	err := db.read(ctx, func(tx *tx) error {
		row := tx.QueryRowContext(ctx, `SELECT `+appColumns+` FROM apps WHERE `+column+` = ?`, value)
		var err error
		app, err = scanApp(row)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT `+webhookColumns+` FROM app_webhooks WHERE app_id = ? ORDER BY id`, app.ID)
		if err != nil {
			return err
		}
		return scanWebhooks(rows, func(_ string, w Webhook) { app.Webhooks = append(app.Webhooks, w) })
	})
	return app, err
}

// ListApps returns every app with its webhooks, ordered by id.
func (db *DB) ListApps(ctx context.Context) ([]App, error) {
	var apps []App
	err := db.read(ctx, func(tx *tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT `+appColumns+` FROM apps ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		index := make(map[string]int) // app id → position in apps
		for rows.Next() {
			app, err := scanApp(rows)
			if err != nil {
				return err
			}
			index[app.ID] = len(apps)
			apps = append(apps, app)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// One query for all webhooks rather than one per app.
		rows, err = tx.QueryContext(ctx, `SELECT `+webhookColumns+` FROM app_webhooks ORDER BY app_id, id`)
		if err != nil {
			return err
		}
		return scanWebhooks(rows, func(appID string, w Webhook) {
			app := &apps[index[appID]]
			app.Webhooks = append(app.Webhooks, w)
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list apps: %w", err)
	}
	return apps, nil
}

// UpdateApp replaces every field of the stored app with the same ID, except
// CreatedAt, and replaces its webhooks with app.Webhooks. It returns
// ErrNotFound when there is no such app and ErrConflict when the new key
// belongs to another app.
func (db *DB) UpdateApp(ctx context.Context, app App) error {
	app = app.withDefaults()
	err := db.write(ctx, func(tx *tx) error {
		if err := checkPushInstance(ctx, tx, app.PushInstance); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE apps SET key = ?, secret = ?, enabled = ?, client_events = ?,
			subscription_count = ?, user_auth_timeout_ms = ?, max_connections = ?, max_presence_members = ?,
			max_presence_user_info_bytes = ?, history_events = ?, history_ttl_ms = ?, recovery_window_ms = ?, push_instance = ?, updated_at_ms = ?
			WHERE id = ?`,
			app.Key, app.Secret, app.Enabled, app.ClientEvents, app.SubscriptionCount,
			app.UserAuthTimeout.Milliseconds(), app.MaxConnections, app.MaxPresenceMembers,
			app.MaxPresenceUserInfoBytes, app.HistoryEvents, app.HistoryTTL.Milliseconds(), app.RecoveryWindow.Milliseconds(), nullable(app.PushInstance),
			now().UnixMilli(), app.ID)
		if err != nil {
			return conflict(err)
		}
		if err := rowsAffected(res); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM app_webhooks WHERE app_id = ?`, app.ID); err != nil {
			return err
		}
		_, err = insertWebhooks(ctx, tx, app.ID, app.Webhooks)
		return err
	})
	if err != nil {
		return fmt.Errorf("update app %q: %w", app.ID, err)
	}
	return nil
}

// DeleteApp deletes the app with the given id and its webhooks, or returns
// ErrNotFound.
func (db *DB) DeleteApp(ctx context.Context, id string) error {
	res, err := db.writer.ExecContext(ctx, `DELETE FROM apps WHERE id = ?`, id)
	if err == nil {
		err = rowsAffected(res)
	}
	if err != nil {
		return fmt.Errorf("delete app %q: %w", id, err)
	}
	return nil
}

// CountApps returns the number of apps.
func (db *DB) CountApps(ctx context.Context) (int, error) {
	var n int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM apps`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count apps: %w", err)
	}
	return n, nil
}

// withDefaults returns app with zero limits replaced by their defaults.
func (app App) withDefaults() App {
	if app.MaxPresenceMembers == 0 {
		app.MaxPresenceMembers = DefaultMaxPresenceMembers
	}
	if app.MaxPresenceUserInfoBytes == 0 {
		app.MaxPresenceUserInfoBytes = DefaultMaxPresenceUserInfoBytes
	}
	if app.HistoryEvents > 0 && app.HistoryTTL == 0 {
		app.HistoryTTL = DefaultHistoryTTL
	}
	switch {
	case app.RecoveryWindow == 0:
		app.RecoveryWindow = DefaultRecoveryWindow
	case app.RecoveryWindow < 0:
		app.RecoveryWindow = RecoveryOff
	}
	return app
}

// checkPushInstance is ErrUnknownInstance unless id is empty (no link) or
// names an instance. Checked in the writing transaction, so that the answer
// names the cause; the foreign key (migration 0016) holds the link to an
// instance deleted at the same moment.
func checkPushInstance(ctx context.Context, tx *tx, id string) error {
	if id == "" {
		return nil
	}
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM instances WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %q", ErrUnknownInstance, id)
	}
	return err
}

// nullable is s, or NULL when it is empty: a column with a foreign key
// holds NULL for "none".
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func scanApp(s scanner) (App, error) {
	var app App
	var userAuthTimeoutMS, historyTTLMS, recoveryWindowMS, createdMS, updatedMS int64
	var pushInstance sql.NullString
	err := s.Scan(&app.ID, &app.Key, &app.Secret, &app.Enabled, &app.ClientEvents, &app.SubscriptionCount,
		&userAuthTimeoutMS, &app.MaxConnections, &app.MaxPresenceMembers, &app.MaxPresenceUserInfoBytes,
		&app.HistoryEvents, &historyTTLMS, &recoveryWindowMS, &pushInstance, &createdMS, &updatedMS)
	if err != nil {
		return App{}, err
	}
	app.PushInstance = pushInstance.String
	app.UserAuthTimeout = time.Duration(userAuthTimeoutMS) * time.Millisecond
	app.HistoryTTL = time.Duration(historyTTLMS) * time.Millisecond
	app.RecoveryWindow = time.Duration(recoveryWindowMS) * time.Millisecond
	app.CreatedAt = fromMillis(createdMS)
	app.UpdatedAt = fromMillis(updatedMS)
	return app, nil
}

// webhookColumns lists the app_webhooks columns in the order scanWebhooks reads them.
const webhookColumns = `app_id, id, url, event_types, channel_prefix, batch`

// insertWebhooks stores webhooks for the app and returns them as stored: with
// their new IDs, and an empty EventTypes as nil, as a read returns it.
func insertWebhooks(ctx context.Context, tx *tx, appID string, webhooks []Webhook) ([]Webhook, error) {
	var stored []Webhook
	for _, w := range webhooks {
		eventTypes := "[]" // json.Marshal would write a nil slice as null
		if len(w.EventTypes) > 0 {
			b, err := json.Marshal(w.EventTypes)
			if err != nil {
				return nil, err
			}
			eventTypes = string(b)
			w.EventTypes = slices.Clone(w.EventTypes) // not shared with the caller
		} else {
			w.EventTypes = nil
		}
		if err := tx.QueryRowContext(ctx, `INSERT INTO app_webhooks (app_id, url, event_types, channel_prefix, batch)
			VALUES (?, ?, ?, ?, ?) RETURNING id`, appID, w.URL, eventTypes, w.ChannelPrefix, w.Batch).Scan(&w.ID); err != nil {
			return nil, err
		}
		stored = append(stored, w)
	}
	return stored, nil
}

// scanWebhooks reads every row of rows, closes it, and hands each webhook to
// add with its app id.
func scanWebhooks(rows *sql.Rows, add func(appID string, w Webhook)) error {
	defer rows.Close()
	for rows.Next() {
		var appID, eventTypes string
		var w Webhook
		if err := rows.Scan(&appID, &w.ID, &w.URL, &eventTypes, &w.ChannelPrefix, &w.Batch); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(eventTypes), &w.EventTypes); err != nil {
			return fmt.Errorf("webhook %d event types: %w", w.ID, err)
		}
		if len(w.EventTypes) == 0 {
			w.EventTypes = nil
		}
		add(appID, w)
	}
	return rows.Err()
}
