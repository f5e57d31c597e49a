package hub

// EventKind is a kind of channel event that webhooks report.
type EventKind string

// The event kinds, named as in Pusher webhooks.
const (
	ChannelOccupied   EventKind = "channel_occupied"
	ChannelVacated    EventKind = "channel_vacated"
	MemberAdded       EventKind = "member_added"
	MemberRemoved     EventKind = "member_removed"
	ClientEvent       EventKind = "client_event"
	CacheMiss         EventKind = "cache_miss"
	SubscriptionCount EventKind = "subscription_count"
)

// Event is something that happened on a channel, for webhooks (and later
// metrics and the debug console).
type Event struct {
	AppID    string
	Kind     EventKind
	Channel  string
	UserID   string // member_added, member_removed, presence client_event
	Name     string // client_event: the event name
	Data     string // client_event: the data
	SocketID string // client_event: the sender
	Count    int    // subscription_count
}

// Observer receives channel events. Observe is called on registry paths,
// sometimes under registry locks: it must return at once and never call back
// into the hub.
type Observer interface {
	Observe(Event)
}

// SetObserver installs the observer; call it before serving.
func (h *Hub) SetObserver(o Observer) { h.observer = o }

// notify hands ev to the observer. A panic of the observer is recovered
// here, logged and counted (ObserverPanics), and the event is lost to it:
// notify runs under registry locks, which a panic travelling further up
// would leave locked, wedging the channel for every other connection.
func (h *Hub) notify(ev Event) {
	if h.observer == nil {
		return
	}
	// No fields: they would be allocated on every call, panic or not.
	defer h.observerPanics.Recover(h.log, "channel event for the observer (webhooks, console)")
	h.observer.Observe(ev)
}

// ObserverPanics is how many panics of the observer were recovered.
func (h *Hub) ObserverPanics() int64 { return h.observerPanics.Count() }

// Observers is an Observer that hands each event to every observer in it, in
// order: the hub has one observer slot, which webhooks and the debug console
// share through it.
type Observers []Observer

// Observe forwards ev to every observer.
func (os Observers) Observe(ev Event) {
	for _, o := range os {
		o.Observe(ev)
	}
}
