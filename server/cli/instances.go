package cli

import (
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/heraldrt/herald/server/manage"
	"github.com/heraldrt/herald/storage"
)

// Instances runs `herald instances <args>`.
func Instances(env Env, args []string) error {
	commands := map[string]command{
		"list":          {"list every Push instance with its secret key", instancesList},
		"show":          {"<id> [--json]: one instance with its gateway settings", instancesShow},
		"create":        {"[--id UUID] [--secret-key K] [options]: create an instance", instancesCreate},
		"update":        {"<id> [options]: change only the options given", instancesUpdate},
		"rotate-secret": {"<id>: give the instance a new secret key", instancesRotate},
		"disable":       {"<id>: refuse the instance's API calls (update --enabled=false)", instancesSetEnabled(false)},
		"enable":        {"<id>: accept the instance's API calls again", instancesSetEnabled(true)},
		"delete":        {"<id>: delete an instance", instancesDelete},
	}
	return run(env, "instances", commands, []string{"list", "show", "create", "update", "rotate-secret", "disable", "enable", "delete"}, args)
}

// instanceFlags binds the options shared by create and update.
type instanceFlags struct {
	fs                               *flag.FlagSet
	in                               *storage.Instance
	apnsKeyFile, apnsCAFile, fcmFile string
}

func newInstanceFlags(name string, in *storage.Instance) *instanceFlags {
	f := &instanceFlags{fs: flag.NewFlagSet("herald instances "+name, flag.ContinueOnError), in: in}
	fs := f.fs
	fs.StringVar(&in.SecretKey, "secret-key", in.SecretKey, "secret key for the Publish API and user JWTs")
	fs.BoolVar(&in.Enabled, "enabled", in.Enabled, "accept API calls")
	fs.StringVar(&in.JWTIssuer, "jwt-issuer", in.JWTIssuer, "extra accepted issuer of user JWTs")
	fs.IntVar(&in.PublishQuota, "publish-quota", in.PublishQuota, "publishes allowed per day (0 = no limit)")
	fs.StringVar(&f.apnsKeyFile, "apns-key-file", "", "APNs .p8 token signing key")
	fs.StringVar(&in.APNs.KeyID, "apns-key-id", in.APNs.KeyID, "APNs key id")
	fs.StringVar(&in.APNs.TeamID, "apns-team-id", in.APNs.TeamID, "Apple team id")
	fs.StringVar(&in.APNs.Topic, "apns-topic", in.APNs.Topic, "default apns-topic (bundle id)")
	fs.StringVar(&in.APNs.URL, "apns-url", in.APNs.URL, "APNs base URL (default https://api.push.apple.com)")
	fs.StringVar(&f.apnsCAFile, "apns-ca-file", "", "extra CA (PEM) to trust for the APNs URL")
	fs.StringVar(&f.fcmFile, "fcm-service-account-file", "", "FCM service account JSON")
	fs.StringVar(&in.FCM.URL, "fcm-url", in.FCM.URL, "FCM base URL (default https://fcm.googleapis.com)")
	fs.StringVar(&in.VAPID.Subject, "vapid-subject", in.VAPID.Subject, "mailto: or https: URI sent in VAPID tokens")
	return f
}

func (f *instanceFlags) apply() error {
	// A list, not a map keyed by path: two options may name the same file.
	files := []struct {
		path string
		dst  *string
	}{
		{f.apnsKeyFile, &f.in.APNs.KeyPEM},
		{f.apnsCAFile, &f.in.APNs.CAPEM},
		{f.fcmFile, &f.in.FCM.ServiceAccountJSON},
	}
	for _, file := range files {
		if file.path == "" {
			continue
		}
		b, err := os.ReadFile(file.path)
		if err != nil {
			return err
		}
		*file.dst = string(b)
	}
	return manage.ValidateInstance(*f.in)
}

func instancesList(env Env, db *storage.DB, args []string) error {
	if _, err := parseFlags(env, flag.NewFlagSet("herald instances list", flag.ContinueOnError), args); err != nil {
		return err
	}
	list, err := db.ListInstances(env.Ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSECRET KEY\tENABLED\tAPNS\tFCM\tWEB")
	for _, in := range list {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%v\t%v\n", in.ID, in.SecretKey, in.Enabled, in.APNs.KeyPEM != "", in.FCM.ServiceAccountJSON != "", in.VAPID.PublicKey != "")
	}
	return tw.Flush()
}

func instancesShow(env Env, db *storage.DB, args []string) error {
	fs := flag.NewFlagSet("herald instances show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print as JSON")
	pos, err := parseFlags(env, fs, args, "<id>")
	if err != nil {
		return err
	}
	in, err := db.GetInstance(env.Ctx, pos[0])
	if err != nil {
		return notFound("instance", pos[0], err)
	}
	if *asJSON {
		return printJSON(env.Stdout, in)
	}
	printInstance(env, in)
	return nil
}

func printInstance(env Env, in storage.Instance) {
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	orDefault := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	fmt.Fprintf(tw, "id\t%s\nsecret key\t%s\nenabled\t%v\njwt issuer\t%s\npublish quota\t%d\n",
		in.ID, in.SecretKey, in.Enabled, orDefault(in.JWTIssuer, "(standard only)"), in.PublishQuota)
	fmt.Fprintf(tw, "apns\tkey %v, key id %q, team %q, topic %q, url %s\n",
		in.APNs.KeyPEM != "", in.APNs.KeyID, in.APNs.TeamID, in.APNs.Topic, orDefault(in.APNs.URL, "https://api.push.apple.com"))
	fmt.Fprintf(tw, "fcm\tservice account %v, url %s\n", in.FCM.ServiceAccountJSON != "", orDefault(in.FCM.URL, "https://fcm.googleapis.com"))
	fmt.Fprintf(tw, "web push\tvapid public key %s, subject %q\n", in.VAPID.PublicKey, in.VAPID.Subject)
	tw.Flush()
}

func instancesCreate(env Env, db *storage.DB, args []string) error {
	in, err := manage.NewInstance()
	if err != nil {
		return err
	}
	f := newInstanceFlags("create", &in)
	f.fs.StringVar(&in.ID, "id", in.ID, "instance id, a UUID (default: random)")
	if _, err := parseFlags(env, f.fs, args); err != nil {
		return err
	}
	if err := f.apply(); err != nil {
		return err
	}
	created, err := db.CreateInstance(env.Ctx, in)
	if err != nil {
		return notFound("instance", in.ID, err)
	}
	printInstance(env, created)
	return nil
}

func instancesUpdate(env Env, db *storage.DB, args []string) error {
	id, rest := splitID(args)
	if id == "" {
		fmt.Fprintln(env.Stderr, "usage: herald instances update <id> [options]")
		return ErrUsage
	}
	in, err := db.GetInstance(env.Ctx, id)
	if err != nil {
		return notFound("instance", id, err)
	}
	f := newInstanceFlags("update", &in)
	if _, err := parseFlags(env, f.fs, rest); err != nil {
		return err
	}
	if len(setFlags(f.fs)) == 0 {
		return fmt.Errorf("nothing to update: give at least one option (herald instances update %s --help)", id)
	}
	if err := f.apply(); err != nil {
		return err
	}
	if err := db.UpdateInstance(env.Ctx, in); err != nil {
		return notFound("instance", id, err)
	}
	printInstance(env, in)
	return nil
}

func instancesRotate(env Env, db *storage.DB, args []string) error {
	pos, err := parseFlags(env, flag.NewFlagSet("herald instances rotate-secret", flag.ContinueOnError), args, "<id>")
	if err != nil {
		return err
	}
	in, err := db.GetInstance(env.Ctx, pos[0])
	if err != nil {
		return notFound("instance", pos[0], err)
	}
	if err := manage.RotateInstanceSecret(&in); err != nil {
		return err
	}
	if err := db.UpdateInstance(env.Ctx, in); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "new secret key of instance %s: %s\n", in.ID, in.SecretKey)
	return nil
}

// instancesSetEnabled is `instances disable` or `instances enable`.
func instancesSetEnabled(enabled bool) func(env Env, db *storage.DB, args []string) error {
	verb := map[bool]string{true: "enable", false: "disable"}[enabled]
	return func(env Env, db *storage.DB, args []string) error {
		pos, err := parseFlags(env, flag.NewFlagSet("herald instances "+verb, flag.ContinueOnError), args, "<id>")
		if err != nil {
			return err
		}
		in, err := db.GetInstance(env.Ctx, pos[0])
		if err != nil {
			return notFound("instance", pos[0], err)
		}
		in.Enabled = enabled
		if err := db.UpdateInstance(env.Ctx, in); err != nil {
			return notFound("instance", pos[0], err)
		}
		fmt.Fprintf(env.Stdout, "instance %s %sd\n", in.ID, verb)
		return nil
	}
}

func instancesDelete(env Env, db *storage.DB, args []string) error {
	pos, err := parseFlags(env, flag.NewFlagSet("herald instances delete", flag.ContinueOnError), args, "<id>")
	if err != nil {
		return err
	}
	if err := db.DeleteInstance(env.Ctx, pos[0]); err != nil {
		return notFound("instance", pos[0], err)
	}
	fmt.Fprintf(env.Stdout, "deleted instance %s\n", pos[0])
	return nil
}
