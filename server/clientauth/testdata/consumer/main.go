// Command consumer is a program of another team: a module of its own that
// imports Herald's generated clients and clientauth through its go.mod, as
// the README's "Generated clients" section says. TestExternalModule builds
// it in a temporary folder (this folder is testdata, outside every build of
// Herald) and runs it against a live Herald; it prints one line per call.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/heraldrt/herald/gen/adminclient"
	"github.com/heraldrt/herald/gen/channelsclient"
	"github.com/heraldrt/herald/gen/deviceclient"
	"github.com/heraldrt/herald/gen/publishclient"
	"github.com/heraldrt/herald/gen/reportingclient"
	"github.com/heraldrt/herald/server/clientauth"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

func run() error {
	url := flag.String("url", "", "Herald's base URL")
	appID := flag.String("app-id", "", "Channels app id")
	key := flag.String("key", "", "Channels app key")
	secret := flag.String("secret", "", "Channels app secret")
	instance := flag.String("instance", "", "Push instance id")
	secretKey := flag.String("secret-key", "", "Push instance secret key")
	adminToken := flag.String("admin-token", "", "HERALD_ADMIN_TOKEN")
	flag.Parse()
	ctx := context.Background()

	// Channels: trigger an event.
	channels, err := channelsclient.NewClientWithResponses(*url,
		channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner(*key, *secret)))
	if err != nil {
		return err
	}
	channel, name, data := "consumer-channel", "consumer-event", `{"from":"consumer"}`
	trig, err := channels.TriggerEventWithResponse(ctx, *appID, nil, channelsclient.TriggerEventJSONRequestBody{
		Channel: &channel, Name: &name, Data: &data,
	})
	if err != nil {
		return fmt.Errorf("trigger: %w", err)
	}
	if trig.JSON200 == nil {
		return fmt.Errorf("trigger: %s %s", trig.Status(), trig.Body)
	}
	fmt.Println("triggered", channel, name)

	// Device API: register a device with an interest and bind it to a user.
	devices, err := deviceclient.NewClientWithResponses(*url)
	if err != nil {
		return err
	}
	reg, err := devices.RegisterFcmDeviceWithResponse(ctx, *instance, deviceclient.RegisterFcmDeviceJSONRequestBody{Token: "consumer-fcm-token"})
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if reg.JSON200 == nil {
		return fmt.Errorf("register: %s %s", reg.Status(), reg.Body)
	}
	deviceID := reg.JSON200.ID
	added, err := devices.AddDeviceInterestWithResponse(ctx, *instance, "fcm", deviceID, "consumer-interest")
	if err != nil {
		return fmt.Errorf("add interest: %w", err)
	}
	if added.StatusCode() != 200 {
		return fmt.Errorf("add interest: %s %s", added.Status(), added.Body)
	}
	token, err := clientauth.BeamsUserTokens{InstanceID: *instance, SecretKey: *secretKey}.Generate("consumer-user")
	if err != nil {
		return err
	}
	bound, err := devices.SetDeviceUserWithResponse(ctx, *instance, "fcm", deviceID, clientauth.BearerToken(token))
	if err != nil {
		return fmt.Errorf("set user: %w", err)
	}
	if bound.StatusCode() != 200 {
		return fmt.Errorf("set user: %s %s", bound.Status(), bound.Body)
	}
	fmt.Println("device", deviceID)

	// Publish API: publish to the interest.
	publishes, err := publishclient.NewClientWithResponses(*url,
		publishclient.WithRequestEditorFn(clientauth.BearerToken(*secretKey)))
	if err != nil {
		return err
	}
	fcm := publishclient.FcmPayload(`{"notification":{"title":"Hi","body":"from another module"}}`)
	pub, err := publishes.PublishToInterestsWithResponse(ctx, *instance, nil, publishclient.PublishToInterestsJSONRequestBody{
		Interests: []string{"consumer-interest"},
		Fcm:       &fcm,
	})
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	if pub.JSON200 == nil {
		return fmt.Errorf("publish: %s %s", pub.Status(), pub.Body)
	}
	fmt.Println("publish", pub.JSON200.PublishID)

	// Reporting API: the device reports the notification opened.
	reports, err := reportingclient.NewClientWithResponses(*url)
	if err != nil {
		return err
	}
	rep, err := reports.ReportEventWithResponse(ctx, *instance, reportingclient.ReportEventJSONRequestBody{
		Event: "open", PublishID: pub.JSON200.PublishID, DeviceID: deviceID, TimestampSecs: 1700000000,
	})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if rep.StatusCode() != 200 {
		return fmt.Errorf("report: %s %s", rep.Status(), rep.Body)
	}
	fmt.Println("reported open")

	// Admin API: read the app back.
	admin, err := adminclient.NewClientWithResponses(*url,
		adminclient.WithRequestEditorFn(clientauth.BearerToken(*adminToken)))
	if err != nil {
		return err
	}
	app, err := admin.GetAppWithResponse(ctx, *appID)
	if err != nil {
		return fmt.Errorf("get app: %w", err)
	}
	if app.JSON200 == nil {
		return fmt.Errorf("get app: %s %s", app.Status(), app.Body)
	}
	fmt.Println("app", app.JSON200.ID, app.JSON200.Key)
	return nil
}
