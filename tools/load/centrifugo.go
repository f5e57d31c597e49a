package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Centrifugo is the peer Herald's cluster is measured against (issue 48),
// so the tool speaks its JSON client protocol too: each WebSocket message
// carries one or more JSON objects separated by newlines; a command has an
// id and its reply the same id; a push (publication, join, …) has none; the
// server's ping is an empty object, answered with one.
const (
	protoPusher     = "pusher"
	protoCentrifugo = "centrifugo"

	centrifugoWSPath      = "/connection/websocket"
	centrifugoPublishPath = "/api/publish"
)

var (
	centrifugoConnect = []byte(`{"id":1,"connect":{"name":"herald-load"}}`)
	centrifugoPing    = []byte(`{}`)
	centrifugoPush    = []byte(`{"push":`)
)

// centrifugoError is the error of a reply, or of an HTTP API response.
type centrifugoError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// centrifugoMessage is what the tool reads of a message the server sent.
type centrifugoMessage struct {
	ID    uint32           `json:"id"`
	Error *centrifugoError `json:"error"`
	Push  *struct {
		Pub *struct {
			Data json.RawMessage `json:"data"`
		} `json:"pub"`
	} `json:"push"`
}

// newline separates the JSON messages of one WebSocket frame.
var newline = []byte{'\n'}

// subscribeCentrifugo connects anonymously and subscribes conn to channel:
// the connect command, and once the reply of its id came the subscribe
// command, until the reply of that one's id; pings on the way are answered.
func subscribeCentrifugo(conn wsConn, channel string) error {
	subscribe, _ := json.Marshal(map[string]any{"id": 2, "subscribe": map[string]string{"channel": channel}})
	if err := conn.WriteText(centrifugoConnect); err != nil {
		return err
	}
	want := uint32(1) // the id of the command whose reply is awaited
	for {
		frame, err := conn.ReadMessage()
		if err != nil {
			return fmt.Errorf("before subscribed: %s: %w", closeCode(err), plainErr(err))
		}
		for msg := range bytes.SplitSeq(frame, newline) {
			if len(msg) == 0 {
				continue
			}
			if bytes.Equal(msg, centrifugoPing) {
				if err := conn.WriteText(centrifugoPing); err != nil {
					return err
				}
				continue
			}
			var m centrifugoMessage
			if err := json.Unmarshal(msg, &m); err != nil {
				return fmt.Errorf("bad frame: %v", err)
			}
			if m.ID != want {
				continue // a push, or the reply of no command awaited
			}
			if m.Error != nil {
				return fmt.Errorf("centrifugo: error %d %s in the reply to command %d", m.Error.Code, m.Error.Message, m.ID)
			}
			if want == 2 {
				return nil
			}
			want = 2
			if err := conn.WriteText(subscribe); err != nil {
				return err
			}
		}
	}
}

// centrifugoFrame handles one WebSocket message of Centrifugo's protocol
// that arrived at now: each of the JSON messages it carries. A publication
// takes the fast path of Pusher's events: no decoding when it is a push
// with the "hl: marker.
func (r *runner) centrifugoFrame(s *subscriber, frame []byte, now int64) {
	for msg := range bytes.SplitSeq(frame, newline) {
		if len(msg) == 0 {
			continue
		}
		if bytes.HasPrefix(msg, centrifugoPush) {
			if i := bytes.Index(msg, marker); i >= 0 {
				r.deliver(s, msg[i+len(marker):], now)
				continue
			}
		} else if bytes.Equal(msg, centrifugoPing) {
			_ = s.conn.WriteText(centrifugoPing)
			continue
		}
		var m centrifugoMessage
		if json.Unmarshal(msg, &m) != nil {
			s.bad.Add(1)
			continue
		}
		switch {
		case m.Error != nil:
			r.countError(strconv.Itoa(m.Error.Code))
		case m.Push != nil && m.Push.Pub != nil:
			var d string
			if json.Unmarshal(m.Push.Pub.Data, &d) == nil && strings.HasPrefix(d, "hl:") {
				r.deliver(s, []byte(d[len("hl:"):]), now)
			} else {
				s.bad.Add(1)
			}
		default:
			s.other.Add(1) // joins, leaves, replies and the like
		}
	}
}

// sendCentrifugo publishes body through Centrifugo's server HTTP API. The
// API answers 200 with an error in the body when it refuses a publication.
func (r *runner) sendCentrifugo(ctx context.Context, client *http.Client, path string, body []byte) error {
	msg, err := post(ctx, client, r.cfg.httpURL+path, body, map[string]string{"X-API-Key": r.cfg.apiKey})
	if err != nil {
		return err
	}
	var reply struct {
		Error *centrifugoError `json:"error"`
	}
	if err := json.Unmarshal(msg, &reply); err != nil {
		return fmt.Errorf("centrifugo: bad reply %.200q: %v", msg, err)
	}
	if reply.Error != nil {
		return fmt.Errorf("centrifugo: error %d %s", reply.Error.Code, reply.Error.Message)
	}
	return nil
}
