package clientauth_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/heraldrt/herald/gen/adminclient"
	"github.com/heraldrt/herald/gen/channelsclient"
	"github.com/heraldrt/herald/gen/deviceclient"
	"github.com/heraldrt/herald/gen/publishclient"
	"github.com/heraldrt/herald/gen/reportingclient"
	"github.com/heraldrt/herald/server/clientauth"
)

// The examples run against a live Herald at heraldURL (for example
// "http://127.0.0.1:8080") with app 42 (key "my-key", secret "my-secret"),
// Push instance instanceID (secret key secretKey) and HERALD_ADMIN_TOKEN
// adminToken.

// Trigger an event on a channel with the Channels HTTP API, every request
// signed with the app's key and secret.
func ExampleChannelsSigner_channelsclient() {
	ctx := context.Background()
	c, err := channelsclient.NewClientWithResponses(heraldURL,
		channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner(appKey, appSecret)))
	if err != nil {
		log.Fatal(err)
	}
	channel, name, data, info := "my-channel", "my-event", `{"hello":"world"}`, "subscription_count"
	res, err := c.TriggerEventWithResponse(ctx, appID, nil, channelsclient.TriggerEventJSONRequestBody{
		Channel: &channel, Name: &name, Data: &data, Info: &info,
	})
	if err != nil {
		log.Fatal(err)
	}
	if res.JSON200 == nil {
		log.Fatalf("trigger: %s %s", res.Status(), res.Body)
	}
	fmt.Println(res.StatusCode(), "subscribers:", *(*res.JSON200.Channels)[channel].SubscriptionCount)
	// Output: 200 subscribers: 0
}

// Publish a notification to the devices subscribed to an interest with the
// Publish API, authorized by the instance's secret key.
func ExampleBearerToken_publishclient() {
	ctx := context.Background()
	c, err := publishclient.NewClientWithResponses(heraldURL,
		publishclient.WithRequestEditorFn(clientauth.BearerToken(secretKey)))
	if err != nil {
		log.Fatal(err)
	}
	fcm := publishclient.FcmPayload(`{"notification":{"title":"Hello","body":"Hello, world!"}}`)
	res, err := c.PublishToInterestsWithResponse(ctx, instanceID, nil, publishclient.PublishToInterestsJSONRequestBody{
		Interests: []string{"hello"},
		Fcm:       &fcm,
	})
	if err != nil {
		log.Fatal(err)
	}
	if res.JSON200 == nil {
		log.Fatalf("publish: %s %s", res.Status(), res.Body)
	}
	// The publish is stored and delivered in the background; its progress:
	status, err := c.GetPublishWithResponse(ctx, instanceID, res.JSON200.PublishID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.StatusCode(), status.StatusCode(), status.JSON200.PublishID == res.JSON200.PublishID)
	// Output: 200 200 true
}

// List the apps with the admin API, authorized by HERALD_ADMIN_TOKEN.
func ExampleBearerToken_adminclient() {
	ctx := context.Background()
	c, err := adminclient.NewClientWithResponses(heraldURL,
		adminclient.WithRequestEditorFn(clientauth.BearerToken(adminToken)))
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.ListAppsWithResponse(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if res.JSON200 == nil {
		log.Fatalf("list apps: %s %s", res.Status(), res.Body)
	}
	for _, app := range res.JSON200.Apps {
		fmt.Println(app.ID, app.Key, app.Enabled)
	}
	// Output: 42 my-key true
}

// Register an Android device with the Device API (anonymous, as the device
// SDKs call it), then bind it to a user with a user token the customer's
// server generated.
func ExampleBeamsUserTokens_Generate_deviceclient() {
	ctx := context.Background()
	c, err := deviceclient.NewClientWithResponses(heraldURL)
	if err != nil {
		log.Fatal(err)
	}
	reg, err := c.RegisterFcmDeviceWithResponse(ctx, instanceID, deviceclient.RegisterFcmDeviceJSONRequestBody{
		Token: "fcm-registration-token-of-the-device",
	})
	if err != nil {
		log.Fatal(err)
	}
	if reg.JSON200 == nil {
		log.Fatalf("register: %s %s", reg.Status(), reg.Body)
	}
	deviceID := reg.JSON200.ID

	// On the customer's server, for the signed-in user:
	token, err := clientauth.BeamsUserTokens{InstanceID: instanceID, SecretKey: secretKey}.Generate("alice")
	if err != nil {
		log.Fatal(err)
	}

	// On the device, with the token it got from the customer's server:
	bound, err := c.SetDeviceUserWithResponse(ctx, instanceID, "fcm", deviceID, clientauth.BearerToken(token))
	if err != nil {
		log.Fatal(err)
	}
	if bound.JSON200 == nil {
		log.Fatalf("set user: %s %s", bound.Status(), bound.Body)
	}
	dev, err := c.GetDeviceWithResponse(ctx, instanceID, "fcm", deviceID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(bound.StatusCode(), dev.JSON200.UserID)
	// Output: 200 alice
}

// Report that a notification was opened, as the device SDKs do, with the
// Reporting API (anonymous: no editor). The publish and device ids come from
// the notification's data.pusher metadata; Herald answers 200 to every
// well-formed report and counts those of a publish that targeted the device.
func Example_reportingclient() {
	ctx := context.Background()
	c, err := reportingclient.NewClientWithResponses(heraldURL)
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.ReportEventWithResponse(ctx, instanceID, reportingclient.ReportEventJSONRequestBody{
		Event:         "open",
		PublishID:     "pubid-33f3f68e-b0c5-438f-b50f-fae93f6c48df",
		DeviceID:      "fcm-2f3a7c1e-6b3d-4b8e-9a1f-0c7d5e4b3a2f",
		TimestampSecs: 1700000000,
	})
	if err != nil {
		log.Fatal(err)
	}
	body, _ := json.Marshal(res.JSON200)
	fmt.Println(res.StatusCode(), string(body))
	// Output: 200 {}
}
