package node

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	pushnotifications "github.com/pusher/push-notifications-go"

	"github.com/heraldrt/herald/gen/channelsclient"
	"github.com/heraldrt/herald/server/clientauth"
	"github.com/heraldrt/herald/server/config"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/server/push/pushtest"
	"github.com/heraldrt/herald/server/signing"
	"github.com/heraldrt/herald/storage/testpg"
)

// pushIfOfflineConfig is a node of app 77 linked to the default instance,
// whose gateways are gw's.
func pushIfOfflineConfig(t *testing.T, gw *gateways, db string) config.Config {
	cfg := pushConfig(t, gw, db)
	cfg.AppID, cfg.AppKey, cfg.AppSecret = "77", "go-sdk-key", "go-sdk-secret"
	cfg.AppPushInstance = beamsInstance
	return cfg
}

// userDevices registers a device on each gateway through base's Device API
// and gives them to user; it returns the gateways' tokens (for the web
// device, its subscriber).
type userDevices struct {
	apns, fcm string
	web       *pushtest.WebSubscriber
}

func registerUserDevices(t *testing.T, gw *gateways, base, user string) userDevices {
	t.Helper()
	beams, err := pushnotifications.New(beamsInstance, beamsSecret, pushnotifications.WithCustomBaseURL(base))
	if err != nil {
		t.Fatal(err)
	}
	token, err := beams.GenerateToken(user)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := gw.web.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	ud := userDevices{apns: "ab" + fmt.Sprintf("%x", user), fcm: "fcm-" + user, web: sub}
	for _, d := range []beamsDevice{register(t, base, "apns", ud.apns), register(t, base, "fcm", ud.fcm), register(t, base, "web", sub.Token())} {
		url := base + "/device_api/v1/instances/" + beamsInstance + "/devices/" + d.platform + "/" + d.id + "/user"
		if status, out := call(t, "PUT", url, nil, "Authorization", "Bearer "+token["token"].(string)); status != 200 {
			t.Fatalf("set user: %d %s", status, out)
		}
	}
	return ud
}

// signedInSocket is a WebSocket connection of app 77 signed in as a user
// and subscribed to the user's channel, as pusher-js's signin() makes one.
type signedInSocket struct {
	t  *testing.T
	ws *websocket.Conn
}

func signIn(t *testing.T, addr, user string) *signedInSocket {
	t.Helper()
	ctx := context.Background()
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/app/go-sdk-key?protocol=7", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.CloseNow() })
	s := &signedInSocket{t: t, ws: ws}
	var established struct {
		SocketID string `json:"socket_id"`
	}
	json.Unmarshal([]byte(s.next("pusher:connection_established").Data), &established)
	userData := `{"id":"` + user + `"}`
	msg, _ := json.Marshal(map[string]any{"event": "pusher:signin", "data": map[string]string{
		"auth": signing.UserAuth("go-sdk-key", "go-sdk-secret", established.SocketID, userData), "user_data": userData,
	}})
	if err := ws.Write(ctx, websocket.MessageText, msg); err != nil {
		t.Fatal(err)
	}
	s.next("pusher:signin_success")
	// As pusher-js does once signed in: the user's channel.
	msg, _ = json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{"channel": "#server-to-user-" + user}})
	if err := ws.Write(ctx, websocket.MessageText, msg); err != nil {
		t.Fatal(err)
	}
	s.next("pusher_internal:subscription_succeeded")
	return s
}

type socketFrame struct{ Event, Channel, Data string }

// next reads frames until one of event comes, and returns it.
func (s *signedInSocket) next(event string) socketFrame {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a deadline against a hang, not a timing
	defer cancel()
	for {
		_, b, err := s.ws.Read(ctx)
		if err != nil {
			s.t.Fatalf("waiting for %s: %v", event, err)
		}
		var f socketFrame
		if err := json.Unmarshal(b, &f); err != nil {
			s.t.Fatalf("frame %s: %v", b, err)
		}
		if f.Event == event {
			return f
		}
	}
}

// triggerPushIfOffline triggers event to user's channel through addr with a
// push_if_offline for every platform, titled title, and returns the answer.
func triggerPushIfOffline(t *testing.T, addr, user, event, title string) channelsclient.TriggerEventResult {
	t.Helper()
	c, err := channelsclient.NewClientWithResponses("http://"+addr, channelsclient.WithRequestEditorFn(clientauth.ChannelsSigner("go-sdk-key", "go-sdk-secret")))
	if err != nil {
		t.Fatal(err)
	}
	raw := func(s string) *json.RawMessage { m := json.RawMessage(s); return &m }
	res, err := c.TriggerEventWithResponse(context.Background(), "77", nil, channelsclient.TriggerEventRequest{
		Name: &event, Data: ptr(`{"title":"` + title + `"}`), Channel: ptr("#server-to-user-" + user),
		PushIfOffline: &channelsclient.PushIfOffline{
			Apns: raw(`{"aps":{"alert":{"title":"` + title + `"}}}`),
			Fcm:  raw(`{"notification":{"title":"` + title + `"}}`),
			Web:  raw(`{"notification":{"title":"` + title + `"}}`),
		},
	})
	if err != nil || res.JSON200 == nil {
		t.Fatalf("trigger: %v %d %s", err, res.StatusCode(), res.Body)
	}
	return *res.JSON200
}

// checkPushed waits for the publish to be done, read through base, and
// checks that each of the user's devices got exactly it.
func checkPushed(t *testing.T, gw *gateways, base, user, publishID string, d userDevices) {
	t.Helper()
	if st := waitDone(t, base, publishID); st.Targeted != 3 || st.Sent != 3 {
		t.Fatalf("status %+v, want 3 targeted and sent", st)
	}
	for platform, msgs := range map[string][]pushtest.Message{"apns": gw.apns.For(d.apns), "fcm": gw.fcm.For(d.fcm), "web": gw.web.For(d.web.ID)} {
		if len(msgs) != 1 {
			t.Fatalf("%s device of %s got %d notifications, want 1", platform, user, len(msgs))
		}
		if meta := pusherMeta(t, msgs[0]); meta.PublishID != publishID || meta.UserID != user {
			t.Errorf("%s data.pusher %+v, want publish %s to %s", platform, meta, publishID, user)
		}
	}
}

// publishCount is how many publishes the instance has in n's database.
func publishCount(t *testing.T, n *Node) int {
	t.Helper()
	list, err := n.db.RecentPublishes(context.Background(), beamsInstance, 100)
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

// On one node: a signed-in user gets the event over the socket and no push;
// the same user disconnected gets it through the gateways, as a publish
// whose status the Publish API answers.
func TestPushIfOfflineOneNode(t *testing.T) {
	gw := startGateways(t)
	n, base := serveNodeWith(t, pushIfOfflineConfig(t, gw, filepath.Join(t.TempDir(), "herald.db")), Options{Push: gw.pushOptions()})
	in, err := n.db.GetInstance(context.Background(), beamsInstance)
	if err != nil {
		t.Fatal(err)
	}
	gw.web.VAPIDPublicKey = in.VAPID.PublicKey
	addr := strings.TrimPrefix(base, "http://")
	devices := registerUserDevices(t, gw, base, "alice")

	alice := signIn(t, addr, "alice")
	res := triggerPushIfOffline(t, addr, "alice", "message", "while online")
	if res.DeliveredVia == nil || *res.DeliveredVia != channelsclient.Socket || res.PublishID != nil {
		t.Fatalf("online: answer %+v, want delivered_via socket", res)
	}
	if f := alice.next("message"); f.Channel != "#server-to-user-alice" || f.Data != `{"title":"while online"}` {
		t.Fatalf("alice got %+v", f)
	}
	if c := publishCount(t, n); c != 0 {
		t.Fatalf("%d publishes for a user who was online", c)
	}

	alice.ws.Close(websocket.StatusNormalClosure, "")
	wait.Until(t, "alice is offline", func() bool {
		on, err := n.Hub().State().SignedIn("77", "alice")
		return err == nil && !on
	})
	res = triggerPushIfOffline(t, addr, "alice", "message", "while offline")
	if res.DeliveredVia == nil || *res.DeliveredVia != channelsclient.Push || res.PublishID == nil {
		t.Fatalf("offline: answer %+v, want delivered_via push with a publish_id", res)
	}
	checkPushed(t, gw, base, "alice", *res.PublishID, devices)
	if c := publishCount(t, n); c != 1 {
		t.Fatalf("%d publishes, want the one", c)
	}
}

// Three nodes on Redis and one PostgreSQL database: a user signed in on one
// node is online for a trigger through another; disconnected, the trigger
// through a third publishes, and the status reads the same on every node.
func TestPushIfOfflineThreeNodes(t *testing.T) {
	rs := testredis.Start(t)
	db := testpg.Start(t)
	gw := startGateways(t)
	prefix := fmt.Sprintf("push%d:", time.Now().UnixNano())
	var nodes []*Node
	var addrs []string
	for _, id := range []string{"a", "b", "c"} {
		cfg := pushIfOfflineConfig(t, gw, db)
		cfg.RedisURL, cfg.NodeID = rs.URL(), id
		n, base := serveNodeWith(t, cfg, Options{Push: gw.pushOptions(), ClusterPrefix: prefix, ClusterHeartbeat: 100 * time.Millisecond, ClusterNodeTTL: time.Second})
		nodes, addrs = append(nodes, n), append(addrs, strings.TrimPrefix(base, "http://"))
	}
	in, err := nodes[0].db.GetInstance(context.Background(), beamsInstance)
	if err != nil {
		t.Fatal(err)
	}
	gw.web.VAPIDPublicKey = in.VAPID.PublicKey
	devices := registerUserDevices(t, gw, "http://"+addrs[1], "alice")

	alice := signIn(t, addrs[2], "alice") // on node c
	wait.Until(t, "node a knows alice is online", func() bool {
		on, err := nodes[0].Hub().State().SignedIn("77", "alice")
		return err == nil && on
	})
	res := triggerPushIfOffline(t, addrs[0], "alice", "message", "while online")
	if res.DeliveredVia == nil || *res.DeliveredVia != channelsclient.Socket {
		t.Fatalf("online on another node: answer %+v, want delivered_via socket", res)
	}
	if f := alice.next("message"); f.Data != `{"title":"while online"}` {
		t.Fatalf("alice got %+v on node c", f)
	}
	if c := publishCount(t, nodes[0]); c != 0 {
		t.Fatalf("%d publishes for a user who was online", c)
	}

	alice.ws.Close(websocket.StatusNormalClosure, "")
	wait.Until(t, "node b knows alice is offline", func() bool {
		on, err := nodes[1].Hub().State().SignedIn("77", "alice")
		return err == nil && !on
	})
	res = triggerPushIfOffline(t, addrs[1], "alice", "message", "while offline")
	if res.DeliveredVia == nil || *res.DeliveredVia != channelsclient.Push || res.PublishID == nil {
		t.Fatalf("offline: answer %+v, want delivered_via push with a publish_id", res)
	}
	checkPushed(t, gw, "http://"+addrs[2], "alice", *res.PublishID, devices)
	if st := getStatus(t, "http://"+addrs[0], *res.PublishID); st.State != "done" || st.Sent != 3 {
		t.Fatalf("status on node a %+v, want done with 3 sent", st)
	}
}
