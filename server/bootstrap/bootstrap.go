// Package bootstrap prepares the database at start: the default Channels app
// and Push instance from the environment, or fresh ones on an empty database,
// with their credentials logged once.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/manage"
	"github.com/heraldrt/herald/storage"
)

// Run creates or updates the apps and instances that cfg names and, when the
// database has none, creates a default of each.
func Run(ctx context.Context, db *storage.DB, cfg config.Config, log *zap.Logger) error {
	if err := checkSettings(cfg); err != nil {
		return err
	}
	if err := ensureApp(ctx, db, cfg, log); err != nil {
		return fmt.Errorf("default app: %w", err)
	}
	if err := ensureInstance(ctx, db, cfg, log); err != nil {
		return fmt.Errorf("default instance: %w", err)
	}
	if err := linkPushInstance(ctx, db, cfg); err != nil {
		return fmt.Errorf("HERALD_APP_PUSH_INSTANCE: %w", err)
	}
	return nil
}

// checkSettings holds each setting that goes into the default app or
// instance to the rules the admin API and the CLI apply to the field it
// sets (manage's), before anything is written: a non-UUID
// HERALD_INSTANCE_ID or an app secret with characters the admin API refuses
// stopped nothing at start, and the error names the variable. Each value is
// checked alone, set on an otherwise valid app or instance, so that the
// message is about it; none of the messages shows a secret.
func checkSettings(cfg config.Config) error {
	push := cfg.AppPushInstance
	if push == "none" {
		push = "" // unlinks
	}
	var errs []error
	for _, s := range []struct {
		name, value string
		check       func(string) error
	}{
		{"HERALD_APP_ID", cfg.AppID, func(v string) error { return app(func(a *storage.App) { a.ID = v }) }},
		{"HERALD_APP_KEY", cfg.AppKey, func(v string) error { return app(func(a *storage.App) { a.Key = v }) }},
		{"HERALD_APP_SECRET", cfg.AppSecret, func(v string) error { return app(func(a *storage.App) { a.Secret = v }) }},
		{"HERALD_APP_WEBHOOK_URL", cfg.AppWebhookURL, func(v string) error {
			return app(func(a *storage.App) { a.Webhooks = []storage.Webhook{{URL: v}} })
		}},
		{"HERALD_APP_PUSH_INSTANCE", push, func(v string) error {
			return app(func(a *storage.App) { a.PushInstance = v })
		}},
		{"HERALD_INSTANCE_ID", cfg.InstanceID, func(v string) error { return instance(func(in *storage.Instance) { in.ID = v }) }},
		{"HERALD_INSTANCE_SECRET_KEY", cfg.InstanceSecretKey, func(v string) error {
			return instance(func(in *storage.Instance) { in.SecretKey = v })
		}},
		{"HERALD_APNS_KEY_ID", cfg.APNsKeyID, func(v string) error { return instance(func(in *storage.Instance) { in.APNs.KeyID = v }) }},
		{"HERALD_APNS_TEAM_ID", cfg.APNsTeamID, func(v string) error { return instance(func(in *storage.Instance) { in.APNs.TeamID = v }) }},
		{"HERALD_APNS_TOPIC", cfg.APNsTopic, func(v string) error { return instance(func(in *storage.Instance) { in.APNs.Topic = v }) }},
		{"HERALD_APNS_URL", cfg.APNsURL, func(v string) error { return instance(func(in *storage.Instance) { in.APNs.URL = v }) }},
		{"HERALD_FCM_URL", cfg.FCMURL, func(v string) error { return instance(func(in *storage.Instance) { in.FCM.URL = v }) }},
		{"HERALD_VAPID_SUBJECT", cfg.VAPIDSubject, func(v string) error { return instance(func(in *storage.Instance) { in.VAPID.Subject = v }) }},
	} {
		if s.value == "" {
			continue // unset: the stored value or the default stays
		}
		if err := s.check(s.value); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
	}
	// The gateways' files, read and held to their fields' rules on an
	// instance of no consequence.
	probe := storage.Instance{}
	if err := applyGateways(&probe, cfg); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// app validates an otherwise valid app with set applied to it.
func app(set func(*storage.App)) error {
	a := manage.NewApp()
	set(&a)
	return manage.ValidateApp(a)
}

// instance validates an otherwise valid instance with set applied to it.
func instance(set func(*storage.Instance)) error {
	in := storage.Instance{ID: "00000000-0000-4000-8000-000000000000", SecretKey: "k", Enabled: true}
	set(&in)
	return manage.ValidateInstance(in)
}

// linkPushInstance links the app from the environment to
// HERALD_APP_PUSH_INSTANCE ("none": unlinks it), after both are in place,
// so that it may name the instance HERALD_INSTANCE_ID has just created. An
// instance that does not exist stops the start: triggers with
// push_if_offline would otherwise be refused at run time instead.
func linkPushInstance(ctx context.Context, db *storage.DB, cfg config.Config) error {
	if cfg.AppPushInstance == "" {
		return nil
	}
	app, err := db.GetApp(ctx, cfg.AppID)
	if err != nil {
		return err
	}
	app.PushInstance = cfg.AppPushInstance
	if app.PushInstance == "none" {
		app.PushInstance = ""
	}
	if err := manage.ValidateApp(app); err != nil {
		return err
	}
	err = db.UpdateApp(ctx, app)
	if errors.Is(err, storage.ErrUnknownInstance) {
		return fmt.Errorf("there is no Push instance %s: set HERALD_INSTANCE_ID to it to create it at start, or create it with herald instances create --id %s", app.PushInstance, app.PushInstance)
	}
	return err
}

func ensureApp(ctx context.Context, db *storage.DB, cfg config.Config, log *zap.Logger) error {
	if cfg.AppID == "" {
		n, err := db.CountApps(ctx)
		if err != nil || n > 0 {
			return err
		}
		app, err := db.CreateApp(ctx, manage.NewApp())
		if err != nil {
			return err
		}
		log.Info("created the default Channels app; its credentials are logged only now (herald apps list shows them)",
			zap.String("app_id", app.ID), zap.String("key", app.Key), zap.String("secret", app.Secret))
		return nil
	}
	app, err := db.GetApp(ctx, cfg.AppID)
	create := errors.Is(err, storage.ErrNotFound)
	if err != nil && !create {
		return err
	}
	if create {
		app = manage.NewApp()
		app.ID = cfg.AppID
	}
	if cfg.AppKey != "" {
		app.Key = cfg.AppKey
	}
	if cfg.AppSecret != "" {
		app.Secret = cfg.AppSecret
	}
	if cfg.AppWebhookURL != "" && !hasWebhook(app, cfg.AppWebhookURL) {
		app.Webhooks = append(app.Webhooks, storage.Webhook{URL: cfg.AppWebhookURL})
	}
	if cfg.AppHistoryEvents != nil {
		app.HistoryEvents = *cfg.AppHistoryEvents
	}
	if cfg.AppHistoryTTL != 0 {
		app.HistoryTTL = cfg.AppHistoryTTL
	}
	if w := cfg.AppRecoveryWindow; w != nil {
		app.RecoveryWindow = *w
		if *w == 0 {
			app.RecoveryWindow = storage.RecoveryOff
		}
	}
	if cfg.AppHistoryEvents != nil || cfg.AppHistoryTTL != 0 || cfg.AppRecoveryWindow != nil {
		if err := manage.ValidateApp(app); err != nil {
			return fmt.Errorf("HERALD_APP_HISTORY_EVENTS, HERALD_APP_HISTORY_TTL, HERALD_APP_RECOVERY_WINDOW: %w", err)
		}
	}
	if create {
		if app, err = db.CreateApp(ctx, app); err != nil {
			return err
		}
		log.Info("created the Channels app from HERALD_APP_ID", zap.String("app_id", app.ID), zap.String("key", app.Key))
		return nil
	}
	return db.UpdateApp(ctx, app)
}

func hasWebhook(app storage.App, url string) bool {
	for _, w := range app.Webhooks {
		if w.URL == url && len(w.EventTypes) == 0 && w.ChannelPrefix == "" {
			return true
		}
	}
	return false
}

func ensureInstance(ctx context.Context, db *storage.DB, cfg config.Config, log *zap.Logger) error {
	var in storage.Instance
	create := false
	if cfg.InstanceID == "" {
		list, err := db.ListInstances(ctx)
		if err != nil {
			return err
		}
		switch len(list) {
		case 0:
			if in, err = manage.NewInstance(); err != nil {
				return err
			}
			create = true
		case 1:
			in = list[0] // the gateway variables apply to the only instance
		default:
			if gatewayVarsSet(cfg) {
				log.Warn("gateway variables ignored: several instances exist and HERALD_INSTANCE_ID does not name one")
			}
			return nil
		}
	} else {
		var err error
		in, err = db.GetInstance(ctx, cfg.InstanceID)
		if create = errors.Is(err, storage.ErrNotFound); create {
			if in, err = manage.NewInstance(); err != nil {
				return err
			}
			in.ID = cfg.InstanceID
		} else if err != nil {
			return err
		}
		if cfg.InstanceSecretKey != "" {
			in.SecretKey = cfg.InstanceSecretKey
		}
	}
	if err := applyGateways(&in, cfg); err != nil {
		return err
	}
	if !create {
		return db.UpdateInstance(ctx, in)
	}
	in, err := db.CreateInstance(ctx, in)
	if err != nil {
		return err
	}
	if cfg.InstanceSecretKey != "" {
		// The operator supplied the key and has it: it stays out of the logs,
		// which are often shipped to places that should not hold secrets.
		log.Info("created the Push instance from HERALD_INSTANCE_ID", zap.String("instance_id", in.ID))
		return nil
	}
	log.Info("created the Push instance; its secret key is logged only now (herald instances list shows it)",
		zap.String("instance_id", in.ID), zap.String("secret_key", in.SecretKey))
	return nil
}

func gatewayVarsSet(cfg config.Config) bool {
	return cfg.APNsKeyFile != "" || cfg.APNsKeyID != "" || cfg.APNsTeamID != "" || cfg.APNsTopic != "" ||
		cfg.APNsURL != "" || cfg.APNsCAFile != "" || cfg.FCMServiceAccountFile != "" || cfg.FCMURL != "" || cfg.VAPIDSubject != ""
}

// applyGateways copies the gateway variables that are set onto in, reading
// the key, CA and service account files.
func applyGateways(in *storage.Instance, cfg config.Config) error {
	// A file's content is held to the rules of the field it sets, as
	// checkSettings holds the values of the other variables.
	read := func(name, path string, set func(*storage.Instance, string)) error {
		if path == "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err == nil {
			err = instance(func(probe *storage.Instance) { set(probe, string(b)) })
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		set(in, string(b))
		return nil
	}
	set := func(v string, dst *string) {
		if v != "" {
			*dst = v
		}
	}
	if err := errors.Join(
		read("HERALD_APNS_KEY_FILE", cfg.APNsKeyFile, func(i *storage.Instance, v string) { i.APNs.KeyPEM = v }),
		read("HERALD_APNS_CA_FILE", cfg.APNsCAFile, func(i *storage.Instance, v string) { i.APNs.CAPEM = v }),
		read("HERALD_FCM_SERVICE_ACCOUNT_FILE", cfg.FCMServiceAccountFile, func(i *storage.Instance, v string) { i.FCM.ServiceAccountJSON = v }),
	); err != nil {
		return err
	}
	set(cfg.APNsKeyID, &in.APNs.KeyID)
	set(cfg.APNsTeamID, &in.APNs.TeamID)
	set(cfg.APNsTopic, &in.APNs.Topic)
	set(cfg.APNsURL, &in.APNs.URL)
	set(cfg.FCMURL, &in.FCM.URL)
	set(cfg.VAPIDSubject, &in.VAPID.Subject)
	return nil
}
