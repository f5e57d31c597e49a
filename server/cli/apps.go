package cli

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/heraldrt/herald/server/manage"
	"github.com/heraldrt/herald/storage"
)

// WebhookKinds are the webhook event kinds an app can subscribe to.
var WebhookKinds = manage.WebhookKinds

// Apps runs `herald apps <args>`.
func Apps(env Env, args []string) error {
	commands := map[string]command{
		"list":          {"list every app with its credentials", appsList},
		"show":          {"<id> [--json]: one app with every option", appsShow},
		"create":        {"[--id ID] [--key K] [--secret S] [options]: create an app", appsCreate},
		"update":        {"<id> [options]: change only the options given", appsUpdate},
		"rotate-secret": {"<id>: give the app a new secret", appsRotate},
		"disable":       {"<id>: refuse the app's connections and API calls (update --enabled=false)", appsSetEnabled(false)},
		"enable":        {"<id>: accept the app's connections and API calls again", appsSetEnabled(true)},
		"delete":        {"<id>: delete an app", appsDelete},
	}
	return run(env, "apps", commands, []string{"list", "show", "create", "update", "rotate-secret", "disable", "enable", "delete"}, args)
}

// appFlags binds the options shared by create and update to app.
type appFlags struct {
	fs            *flag.FlagSet
	app           *storage.App
	webhooks      multiFlag
	clearWebhooks bool
}

func newAppFlags(name string, app *storage.App) *appFlags {
	f := &appFlags{fs: flag.NewFlagSet("herald apps "+name, flag.ContinueOnError), app: app}
	fs := f.fs
	fs.StringVar(&app.Key, "key", app.Key, "public key")
	fs.StringVar(&app.Secret, "secret", app.Secret, "secret")
	fs.BoolVar(&app.Enabled, "enabled", app.Enabled, "accept connections and API calls")
	fs.BoolVar(&app.ClientEvents, "client-events", app.ClientEvents, "allow client- events")
	fs.BoolVar(&app.SubscriptionCount, "subscription-count", app.SubscriptionCount, "enable subscription_count")
	fs.DurationVar(&app.UserAuthTimeout, "user-auth-timeout", app.UserAuthTimeout, "close connections that do not sign in or subscribe to an authorized channel in time (0 = off)")
	fs.IntVar(&app.MaxConnections, "max-connections", app.MaxConnections, "connection limit (0 = none)")
	fs.IntVar(&app.MaxPresenceMembers, "max-presence-members", app.MaxPresenceMembers, "members per presence channel")
	fs.IntVar(&app.MaxPresenceUserInfoBytes, "max-user-info-bytes", app.MaxPresenceUserInfoBytes, "size limit of a presence member's user_info")
	fs.IntVar(&app.HistoryEvents, "history-events", app.HistoryEvents, "keep the last N events of each channel for the history API (0 = off)")
	fs.DurationVar(&app.HistoryTTL, "history-ttl", app.HistoryTTL, "forget kept events after this long (0 = 1h when history is on)")
	fs.Func("recovery-window", "a client that comes back within this long gets what it missed, with history on and the recovery plugin (0 = off; default 2m)", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("a duration such as 2m, or 0 for off, not %q", v)
		}
		app.RecoveryWindow = d
		if d == 0 {
			app.RecoveryWindow = storage.RecoveryOff
		}
		return nil
	})
	fs.StringVar(&app.PushInstance, "push-instance", app.PushInstance, "link the app to this Push instance (its id), for triggers with push_if_offline; \"\" unlinks")
	fs.Var(&f.webhooks, "webhook", "add a webhook: URL[,events=kind+kind][,prefix=P][,batch] (repeatable)")
	fs.BoolVar(&f.clearWebhooks, "clear-webhooks", false, "remove every webhook before adding those given")
	return f
}

// apply adds the --webhook values (after --clear-webhooks) and checks limits.
func (f *appFlags) apply() error {
	if f.clearWebhooks {
		f.app.Webhooks = nil
	}
	for _, spec := range f.webhooks {
		w, err := ParseWebhook(spec)
		if err != nil {
			return err
		}
		f.app.Webhooks = append(f.app.Webhooks, w)
	}
	return manage.ValidateApp(*f.app)
}

// ParseWebhook parses URL[,events=kind+kind][,prefix=P][,batch].
func ParseWebhook(spec string) (storage.Webhook, error) { return manage.ParseWebhook(spec) }

func appsList(env Env, db *storage.DB, args []string) error {
	if _, err := parseFlags(env, flag.NewFlagSet("herald apps list", flag.ContinueOnError), args); err != nil {
		return err
	}
	apps, err := db.ListApps(env.Ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKEY\tSECRET\tENABLED\tWEBHOOKS")
	for _, a := range apps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%d\n", a.ID, a.Key, a.Secret, a.Enabled, len(a.Webhooks))
	}
	return tw.Flush()
}

func appsShow(env Env, db *storage.DB, args []string) error {
	fs := flag.NewFlagSet("herald apps show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print as JSON")
	pos, err := parseFlags(env, fs, args, "<id>")
	if err != nil {
		return err
	}
	app, err := db.GetApp(env.Ctx, pos[0])
	if err != nil {
		return notFound("app", pos[0], err)
	}
	if *asJSON {
		return printJSON(env.Stdout, app)
	}
	printApp(env, app)
	return nil
}

func printApp(env Env, a storage.App) {
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	timeout := "off"
	if a.UserAuthTimeout > 0 {
		timeout = a.UserAuthTimeout.String()
	}
	limit := func(n int) string {
		if n == 0 {
			return "none"
		}
		return fmt.Sprint(n)
	}
	fmt.Fprintf(tw, "id\t%s\nkey\t%s\nsecret\t%s\nenabled\t%v\nclient events\t%v\nsubscription count\t%v\n",
		a.ID, a.Key, a.Secret, a.Enabled, a.ClientEvents, a.SubscriptionCount)
	fmt.Fprintf(tw, "user auth timeout\t%s\nmax connections\t%s\nmax presence members\t%d\nmax user info bytes\t%d\n",
		timeout, limit(a.MaxConnections), a.MaxPresenceMembers, a.MaxPresenceUserInfoBytes)
	history := "off"
	if a.HistoryEvents > 0 {
		history = fmt.Sprintf("last %d events per channel, at most %s old", a.HistoryEvents, a.HistoryTTL)
	}
	fmt.Fprintf(tw, "history\t%s\n", history)
	recovery := "off"
	if a.HistoryEvents > 0 && a.RecoveryWindow > 0 {
		recovery = "within " + a.RecoveryWindow.String()
	}
	fmt.Fprintf(tw, "recovery\t%s\n", recovery)
	fmt.Fprintf(tw, "push instance\t%s\n", cmp.Or(a.PushInstance, "none"))
	for _, w := range a.Webhooks {
		kinds := "all events"
		if len(w.EventTypes) > 0 {
			kinds = strings.Join(w.EventTypes, "+")
		}
		fmt.Fprintf(tw, "webhook\t%s (%s; prefix %q; batch %v)\n", w.URL, kinds, w.ChannelPrefix, w.Batch)
	}
	tw.Flush()
}

func appsCreate(env Env, db *storage.DB, args []string) error {
	app := manage.NewApp()
	f := newAppFlags("create", &app)
	f.fs.StringVar(&app.ID, "id", app.ID, "app id (default: random digits)")
	if _, err := parseFlags(env, f.fs, args); err != nil {
		return err
	}
	if err := f.apply(); err != nil {
		return err
	}
	created, err := db.CreateApp(env.Ctx, app)
	if err != nil {
		return appWriteError(app, err)
	}
	printApp(env, created)
	return nil
}

func appsUpdate(env Env, db *storage.DB, args []string) error {
	id, rest := splitID(args)
	if id == "" {
		fmt.Fprintln(env.Stderr, "usage: herald apps update <id> [options]")
		return ErrUsage
	}
	app, err := db.GetApp(env.Ctx, id)
	if err != nil {
		return notFound("app", id, err)
	}
	f := newAppFlags("update", &app)
	if _, err := parseFlags(env, f.fs, rest); err != nil {
		return err
	}
	if len(setFlags(f.fs)) == 0 {
		return fmt.Errorf("nothing to update: give at least one option (herald apps update %s --help)", id)
	}
	if err := f.apply(); err != nil {
		return err
	}
	if err := db.UpdateApp(env.Ctx, app); err != nil {
		return appWriteError(app, err)
	}
	printApp(env, app)
	return nil
}

func appsRotate(env Env, db *storage.DB, args []string) error {
	pos, err := parseFlags(env, flag.NewFlagSet("herald apps rotate-secret", flag.ContinueOnError), args, "<id>")
	if err != nil {
		return err
	}
	app, err := db.GetApp(env.Ctx, pos[0])
	if err != nil {
		return notFound("app", pos[0], err)
	}
	manage.RotateAppSecret(&app)
	if err := db.UpdateApp(env.Ctx, app); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "new secret of app %s: %s\n", app.ID, app.Secret)
	return nil
}

// appsSetEnabled is `apps disable` or `apps enable`. Open connections of a
// disabled app are refused from their next subscription on; new ones at once.
func appsSetEnabled(enabled bool) func(env Env, db *storage.DB, args []string) error {
	verb := map[bool]string{true: "enable", false: "disable"}[enabled]
	return func(env Env, db *storage.DB, args []string) error {
		pos, err := parseFlags(env, flag.NewFlagSet("herald apps "+verb, flag.ContinueOnError), args, "<id>")
		if err != nil {
			return err
		}
		app, err := db.GetApp(env.Ctx, pos[0])
		if err != nil {
			return notFound("app", pos[0], err)
		}
		app.Enabled = enabled
		if err := db.UpdateApp(env.Ctx, app); err != nil {
			return notFound("app", pos[0], err)
		}
		fmt.Fprintf(env.Stdout, "app %s %sd\n", app.ID, verb)
		return nil
	}
}

func appsDelete(env Env, db *storage.DB, args []string) error {
	pos, err := parseFlags(env, flag.NewFlagSet("herald apps delete", flag.ContinueOnError), args, "<id>")
	if err != nil {
		return err
	}
	if err := db.DeleteApp(env.Ctx, pos[0]); err != nil {
		return notFound("app", pos[0], err)
	}
	fmt.Fprintf(env.Stdout, "deleted app %s\n", pos[0])
	return nil
}

// appWriteError names what stopped app from being stored.
func appWriteError(app storage.App, err error) error {
	if errors.Is(err, storage.ErrUnknownInstance) {
		return fmt.Errorf("no Push instance with id %q to link app %q to (herald instances list shows them)", app.PushInstance, app.ID)
	}
	return notFound("app", app.ID, err)
}

// splitID takes the leading positional id off args.
func splitID(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	return "", args
}
