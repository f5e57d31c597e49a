package cluster

import (
	"errors"
	"strconv"
	"strings"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/hub"
)

// Messages between nodes travel in a Redis stream as a kind byte followed
// by fields, each written as its length in decimal, a colon and its bytes
// (a netstring without the trailing comma). The Lua scripts write the same
// format, so the nodes and Redis need no shared encoder.
//
//	E app channel event data user_id exclude_socket cache   an event to deliver
//	T app user_id                                           terminate the user's connections
//	W app user_id online("1"|"0")                           a user came online or went offline
//	S node app channel socket token status cached cache_value recovery [user_id info]...
//	                                                        answer to a Join of node
//	U node app socket [user_id]...                          answer to a SignIn of node: watched users online
//	B message...                                            messages published together, in order
//
// Answers travel in the same stream as everything else, so that they are in
// order with the events of the channel they are about; other nodes skip them.
//
// A cache_value is itself two fields: the event name and its data. A
// recovery is empty, or fields of its own: position mark outcome [id name
// data]... (joinScript).
const (
	kindEvent     = 'E'
	kindTerminate = 'T'
	kindWatch     = 'W'
	kindSnapshot  = 'S'
	kindSignIn    = 'U'
	kindBatch     = 'B'
)

var errMalformed = errors.New("cluster: malformed message")

// appendField appends one field.
func appendField(dst []byte, s string) []byte {
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}

// encodeEvent encodes m as an E message.
func encodeEvent(m hub.Message) string {
	b := make([]byte, 0, 32+len(m.AppID)+len(m.Channel)+len(m.Event)+len(m.Data)+len(m.UserID)+len(m.ExcludeSocketID))
	b = append(b, kindEvent)
	b = appendField(b, m.AppID)
	b = appendField(b, m.Channel)
	b = appendField(b, m.Event)
	b = appendField(b, m.Data)
	b = appendField(b, m.UserID)
	b = appendField(b, m.ExcludeSocketID)
	cache := ""
	if m.Cache {
		cache = "1"
	}
	b = appendField(b, cache)
	return string(b)
}

// encodeFields encodes a message of kind with the given fields.
func encodeFields(kind byte, fields ...string) string {
	n := 1
	for _, f := range fields {
		n += len(f) + 8
	}
	b := make([]byte, 0, n)
	b = append(b, kind)
	for _, f := range fields {
		b = appendField(b, f)
	}
	return string(b)
}

// cacheValue is how a cache channel's last event is kept in Redis.
func cacheValue(event, data string) string {
	return string(appendField(appendField(nil, event), data))
}

// fields splits the body of a message (after its kind byte) into its fields.
func fields(s string) ([]string, error) {
	var out []string
	for len(s) > 0 {
		colon := -1
		for i := 0; i < len(s) && i < 12; i++ {
			if s[i] == ':' {
				colon = i
				break
			}
		}
		if colon <= 0 {
			return nil, errMalformed
		}
		n, err := strconv.Atoi(s[:colon])
		if err != nil || n < 0 || n > len(s)-colon-1 {
			return nil, errMalformed
		}
		out = append(out, s[colon+1:colon+1+n])
		s = s[colon+1+n:]
	}
	return out, nil
}

// startsWithField reports whether the fields s start with the field v.
func startsWithField(s, v string) bool {
	head := strconv.Itoa(len(v)) + ":"
	return strings.HasPrefix(s, head) && strings.HasPrefix(s[len(head):], v)
}

// decodeEvent decodes the fields of an E message.
func decodeEvent(f []string) (hub.Message, error) {
	if len(f) != 7 {
		return hub.Message{}, errMalformed
	}
	return hub.Message{AppID: f[0], Channel: f[1], Event: f[2], Data: f[3], UserID: f[4], ExcludeSocketID: f[5], Cache: f[6] == "1"}, nil
}

// decodeSnapshot decodes the fields of an S message after its node.
func decodeSnapshot(f []string) (hub.Snapshot, error) {
	if len(f) < 8 || (len(f)-8)%2 != 0 {
		return hub.Snapshot{}, errMalformed
	}
	token, err := strconv.ParseUint(f[3], 10, 64)
	if err != nil {
		return hub.Snapshot{}, errMalformed
	}
	s := hub.Snapshot{AppID: f[0], Channel: f[1], SocketID: f[2], Token: token, Full: f[4] == "full"}
	if f[5] == "1" {
		cv, err := fields(f[6])
		if err != nil || len(cv) != 2 {
			return hub.Snapshot{}, errMalformed
		}
		s.Cached, s.CacheEvent, s.CacheData = true, cv[0], cv[1]
	}
	if f[7] != "" {
		rec, err := decodeRecovery(f[7])
		if err != nil {
			return hub.Snapshot{}, err
		}
		s.Recovery = rec
	}
	for i := 8; i+1 < len(f); i += 2 {
		s.Members = append(s.Members, hub.MemberInfo{UserID: f[i], Info: []byte(f[i+1])})
	}
	return s, nil
}

// decodeRecovery decodes the recovery field of an S message.
func decodeRecovery(field string) (*hub.SnapshotRecovery, error) {
	f, err := fields(field)
	if err != nil || len(f) < 3 || (len(f)-3)%3 != 0 {
		return nil, errMalformed
	}
	pos, err := eventlog.ParseID(f[0])
	if err != nil {
		return nil, errMalformed
	}
	rec := &hub.SnapshotRecovery{Position: pos, Mark: f[1]}
	switch f[2] {
	case "", "ok":
	default:
		rec.Reason = f[2]
	}
	for i := 3; i+2 < len(f); i += 3 {
		id, err := eventlog.ParseID(f[i])
		if err != nil {
			return nil, errMalformed
		}
		rec.Events = append(rec.Events, eventlog.Event{ID: id, Name: f[i+1], Data: f[i+2]})
	}
	return rec, nil
}
