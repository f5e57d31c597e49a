// Package eventlog keeps the channel history of the Channels apps that ask
// for it: the last events triggered on each channel, read back through the
// signed GET /apps/{app_id}/channels/{channel_name}/events. An app's
// settings (storage.App.HistoryEvents and HistoryTTL) say how many events
// of a channel are kept and for how long; the node's Limits bound what one
// app may hold in all (bytes and channels), so no app can take the node's
// memory or Redis's.
//
// A Store holds the events: Memory on one node, the cluster's Redis store
// (server/cluster) on several, where every node reads the same history.
// Both follow the same rules, which the suite in eventlogtest checks:
//   - each event gets an ID, "<milliseconds>-<sequence>", that increases
//     with every event of its channel and never changes;
//   - past Policy.Events events of a channel its oldest go, and events older
//     than Policy.TTL are neither returned nor kept;
//   - past Limits.MaxChannels channels of an app, the one written least
//     recently goes whole; past Limits.MaxBytes, once an Append has added
//     its entries, that channel's oldest events go, one at a time, until
//     the app is within its bytes;
//   - an app's bytes are what its history really costs to hold (Cost,
//     ChannelCost), not only its events' names and data, so that MaxBytes
//     bounds the memory of the process or of Redis.
package eventlog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Defaults of Limits.
const (
	DefaultMaxBytes    = 16 << 20
	DefaultMaxChannels = 10000
	// MaxPage is the most events one Read returns.
	MaxPage = 100
)

// What holding an event and a channel costs beyond the bytes of their
// names and data, counted against Limits.MaxBytes. Measured
// (BenchmarkMemoryHeld, cluster's BenchmarkEventLogStoreHeld; README,
// Channel history): in memory an event's slot is 48 bytes (its id and two
// strings) and its strings are rounded up to an allocation's size; in
// Redis a stream entry's header and its share of its stream's node are
// smaller. A channel's log, its place in the app's order of channels and
// its counts cost a few hundred bytes (in Redis: its stream key, a member
// of a sorted set and three counts, each naming the channel).
const (
	EventOverhead   = 64
	ChannelOverhead = 512
	// ChannelNameCopies is how many times a store may hold a channel's
	// name (Redis: the stream's key, the sorted set's member, three
	// counts).
	ChannelNameCopies = 5
)

// ChannelCost is what a channel with history costs, its events aside.
func ChannelCost(channel string) int { return ChannelOverhead + ChannelNameCopies*len(channel) }

// Limits bound the history of one app, whatever its settings.
type Limits struct {
	// MaxBytes bounds what an app's history costs: each event its name,
	// its data and EventOverhead, each channel its ChannelCost;
	// DefaultMaxBytes when 0.
	MaxBytes int
	// MaxChannels bounds the channels an app keeps history of;
	// DefaultMaxChannels when 0.
	MaxChannels int
}

// WithDefaults returns l with its zero fields set to the defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxChannels <= 0 {
		l.MaxChannels = DefaultMaxChannels
	}
	return l
}

// Policy is an app's history setting.
type Policy struct {
	Events int           // events kept per channel; 0: none (history off)
	TTL    time.Duration // age past which an event is forgotten; must be > 0 when Events is
}

// On reports whether the app keeps history.
func (p Policy) On() bool { return p.Events > 0 && p.TTL > 0 }

// ID is an event's place in its channel's history; IDs of a channel's
// events increase in the order they were appended. Its text form,
// "<MS>-<Seq>", is a Redis stream entry's.
type ID struct {
	MS  uint64 // milliseconds since the Unix epoch when it was appended
	Seq uint64 // orders the events of one millisecond
}

// String returns "<MS>-<Seq>".
func (id ID) String() string {
	return strconv.FormatUint(id.MS, 10) + "-" + strconv.FormatUint(id.Seq, 10)
}

// Less reports whether id comes before o.
func (id ID) Less(o ID) bool { return id.MS < o.MS || id.MS == o.MS && id.Seq < o.Seq }

// IsZero reports whether id is the zero ID, which no event has.
func (id ID) IsZero() bool { return id == ID{} }

// Next returns the first ID after id; false when id is the last there is
// (a cursor past every event).
func (id ID) Next() (ID, bool) {
	switch {
	case id.Seq < math.MaxUint64:
		return ID{id.MS, id.Seq + 1}, true
	case id.MS < math.MaxUint64:
		return ID{id.MS + 1, 0}, true
	}
	return ID{}, false
}

// ErrInvalidID means a text is not an event ID.
var ErrInvalidID = errors.New("eventlog: not an event id (<milliseconds>-<sequence>)")

// ParseID parses the text form of an ID.
func ParseID(s string) (ID, error) {
	ms, seq, ok := strings.Cut(s, "-")
	a, err1 := strconv.ParseUint(ms, 10, 64)
	b, err2 := strconv.ParseUint(seq, 10, 64)
	if !ok || err1 != nil || err2 != nil || strings.HasPrefix(ms, "+") || strings.HasPrefix(seq, "+") {
		return ID{}, fmt.Errorf("%w: %q", ErrInvalidID, s)
	}
	return ID{a, b}, nil
}

// Entry is an event to keep: triggered on Channel.
type Entry struct {
	Channel string
	Name    string
	Data    string // as triggered: an encrypted channel's ciphertext
	// Exclude is the socket_id the event was triggered without, which a
	// recovery of that connection's subscription leaves out too. Only a
	// Positioned store keeps it.
	Exclude string
}

// Cost is what keeping the entry counts against Limits.MaxBytes, its
// channel aside (ChannelCost).
func (e Entry) Cost() int { return len(e.Name) + len(e.Data) + len(e.Exclude) + EventOverhead }

// Event is a kept event.
type Event struct {
	ID      ID
	Name    string
	Data    string
	Exclude string // Entry.Exclude
}

// Time is when the event was appended.
func (e Event) Time() time.Time { return time.UnixMilli(int64(e.ID.MS)) }

// Query says which events of a channel Read returns.
type Query struct {
	// Limit is the most events returned, 1 to MaxPage (MaxPage when 0).
	Limit int
	// OldestFirst returns the channel's events in the order they were
	// appended; else the newest first.
	OldestFirst bool
	// After, when set, returns only the events past it in the query's
	// direction: later ones oldest first, earlier ones newest first.
	After ID
}

// Page is what Read returns: the events, and whether more follow them in
// the query's direction.
type Page struct {
	Events []Event
	More   bool
}

// Reason is why kept events were dropped before their TTL.
type Reason int

// The reasons events are dropped.
const (
	DroppedEvents   Reason = iota // past the channel's Policy.Events
	DroppedAge                    // older than Policy.TTL
	DroppedBytes                  // past the app's Limits.MaxBytes
	DroppedChannels               // their channel went: past Limits.MaxChannels
	reasons
)

// String names the reason as the metrics label it.
func (r Reason) String() string {
	return [...]string{"events", "age", "bytes", "channels"}[r]
}

// AppStats is what one app holds, as far as a store knows it.
type AppStats struct {
	AppID  string
	Events int64
	Bytes  int64
}

// Stats are a store's figures for the metrics.
type Stats struct {
	// Apps is what each app holds: on one node exactly; in a cluster as the
	// node last saw it when appending.
	Apps []AppStats
	// Dropped counts the events dropped, by Reason (on this node).
	Dropped [reasons]int64
}

// Store keeps channel histories. Its methods are safe for concurrent use.
type Store interface {
	// Append keeps entries, in order, for app, whose policy is p (On), at
	// now: the caller's clock, which IDs and ages follow (a node whose clock
	// is off shifts the ages of what it appends by as much; IDs still
	// increase).
	Append(ctx context.Context, app string, p Policy, entries []Entry, now time.Time) error
	// Read returns a page of the history of one channel of app, under the
	// app's policy p, as of now.
	Read(ctx context.Context, app, channel string, p Policy, q Query, now time.Time) (Page, error)
	// Stats returns the store's figures.
	Stats() Stats
}

// Positioned is a Store that recovery can build on (one node's Memory):
// it tells the IDs of what it appends, so that a publish can carry them,
// and gives back every event of a channel after a position, saying whether
// its log still holds all of them.
type Positioned interface {
	Store
	// AppendIDs is Append, returning the ID of each entry.
	AppendIDs(ctx context.Context, app string, p Policy, entries []Entry, now time.Time) ([]ID, error)
	// Last is the ID of the newest event appended to the channel (zero
	// when none is kept).
	Last(app, channel string) ID
	// Since returns, oldest first, the events of the channel after after
	// and up to upTo, and complete: false when the log no longer holds
	// every event after after (dropped past a bound or for age, or with
	// their channel), which the caller cannot then make up for.
	Since(ctx context.Context, app, channel string, p Policy, after, upTo ID, now time.Time) (events []Event, complete bool, err error)
	// Epoch names the log's lifetime: a position given by a log of another
	// epoch (a process that ran before this one, whose log went with it)
	// says nothing of what this one holds.
	Epoch() string
}

var _ Positioned = (*Memory)(nil)

// limit is q.Limit within 1..MaxPage.
func (q Query) limit() int {
	if q.Limit <= 0 || q.Limit > MaxPage {
		return MaxPage
	}
	return q.Limit
}
