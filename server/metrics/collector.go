package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldrt/herald/server/eventlog"
	"github.com/heraldrt/herald/server/ws"
)

// outboxTimeout bounds the outbox count query of one scrape.
const outboxTimeout = 2 * time.Second

// collector reads the node's live state and counters at scrape time.
type collector struct {
	src Sources

	connections, channels, subscriptions, members *prometheus.Desc
	triggered                                     *prometheus.Desc
	opened, closed, rejected                      *prometheus.Desc
	clientEvents, delivered, slow                 *prometheus.Desc
	outbox, webhookRequests, webhookAbandoned     *prometheus.Desc
	webhookDropped, webhookUnsent                 *prometheus.Desc
	pushQueue, pushPublishes, pushDeliveries      *prometheus.Desc
	pushDuplicates, pushPages, pushTakenOver      *prometheus.Desc
	panics, rateLimited                           *prometheus.Desc
	clusterUp, clusterNodes, clusterPublished     *prometheus.Desc
	clusterPublishCalls                           *prometheus.Desc
	clusterPublishErrors, clusterReceived         *prometheus.Desc
	clusterReplayed, publishLimitErrors           *prometheus.Desc
	clusterConsole                                *prometheus.Desc
	clusterResyncs, clusterReaped, clusterOutages *prometheus.Desc
	historyEvents, historyBytes, historyDropped   *prometheus.Desc
	recoveries                                    *prometheus.Desc
}

func newCollector(src Sources) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
	}
	return &collector{
		src:              src,
		connections:      d("connections", "Open connections (WebSockets and HTTP fallback sessions), by app.", "app_id"),
		channels:         d("channels", "Occupied channels, by app.", "app_id"),
		subscriptions:    d("subscriptions", "Channel subscriptions (a connection on a channel), by app.", "app_id"),
		members:          d("presence_members", "Distinct presence members summed over presence channels, by app.", "app_id"),
		triggered:        d("events_triggered_total", "Events published through the Channels HTTP API (trigger and batch), counted once per channel.", "app_id"),
		opened:           d("connections_opened_total", "Connections opened, by transport: ws (WebSocket) or xhr (the HTTP fallback's sessions).", "transport"),
		closed:           d("connections_closed_total", "WebSocket connections that ended, by close code (0: the client left; other: a code not listed).", "code"),
		rejected:         d("connections_rejected_total", "WebSocket connections refused at connect time, by close code.", "code"),
		clientEvents:     d("client_events_total", "Client events relayed to their channel."),
		delivered:        d("frames_delivered_total", "Frames handed to WebSocket connection writers: events and protocol replies."),
		slow:             d("slow_consumers_closed_total", "Connections closed with 4100 because their outbound queue overflowed."),
		outbox:           d("webhook_outbox_depth", "Webhook requests waiting in the durable outbox (new or to be retried)."),
		webhookRequests:  d("webhook_requests_total", "Webhook delivery attempts, by outcome (delivered, failed).", "outcome"),
		webhookAbandoned: d("webhooks_abandoned_total", "Webhook requests given up after an attempt: retry time over, bad URL, app deleted, or a panic while sending."),
		webhookDropped:   d("webhook_events_dropped_total", "Channel events lost before the webhook outbox because its buffer was full."),
		webhookUnsent:    d("webhook_requests_dropped_total", "Webhook requests dropped unsent, by reason: over_cap (the app's oldest, past HERALD_WEBHOOK_MAX_QUEUED), expired (older than the 5-minute retry window), unwritten (the outbox could not be written).", "reason"),
		pushQueue:        d("push_dispatch_queue_depth", "Push deliveries waiting to be sent."),
		pushPublishes:    d("push_publishes_total", "Push publishes accepted."),
		pushDeliveries:   d("push_deliveries_total", "Push delivery attempts, by gateway and outcome.", "gateway", "outcome"),
		pushDuplicates:   d("push_duplicates_total", "Push deliveries this node sent that another node sends again: in flight when that node took their page over."),
		pushPages: d("push_pages_total", "Pages of publishes' targets this node claimed to send, by how: next (a stream's next page) or taken_over "+
			"(from a node whose lease on it ran out). Each node counts its own: their sum is the publish's work and its split.", "how"),
		pushTakenOver: d("push_taken_over_deliveries_total", "Deliveries of the pages this node took over: the most their first owner may have sent too."),
		panics:        d("panics_total", "Panics recovered, by the part that recovered them; each lost only its connection or piece of work.", "part"),
		rateLimited:   d("rate_limited_total", "Requests, connections or subscribes refused by a rate limit or cap, by limit.", "limit"),
		publishLimitErrors: d("publish_rate_limit_errors_total",
			"Publish API requests that found the database failing when taking from their instance's shared rate limit, and were limited by this node alone."),

		clusterUp:            d("cluster_up", "1 while Redis answers this node's heartbeat (cluster mode), 0 during an outage."),
		clusterNodes:         d("cluster_nodes", "Live nodes of the cluster, this one included, as of the last heartbeat."),
		clusterPublished:     d("cluster_messages_published_total", "Messages this node published to the cluster (events, terminations)."),
		clusterPublishCalls:  d("cluster_publish_calls_total", "Script calls to Redis that carried this node's published messages: messages published ÷ calls is how many a call carries, and Redis's CPU goes by calls."),
		clusterPublishErrors: d("cluster_publish_errors_total", "Publishes refused because Redis failed (triggers answered 503)."),
		clusterReceived:      d("cluster_messages_received_total", "Messages this node received from the cluster."),
		clusterResyncs:       d("cluster_resyncs_total", "Times this node rebuilt its record in Redis (at start and after each outage)."),
		clusterReaped:        d("cluster_nodes_reaped_total", "Dead nodes whose clients this node took out of the cluster."),
		clusterOutages:       d("cluster_outages_total", "Times Redis stopped answering this node."),
		clusterReplayed:      d("cluster_messages_replayed_total", "Messages this node published again because Redis lost its data before every node had read them."),
		historyEvents:        d("history_events", "Events kept in channel histories, by app (in a cluster: as of this node's last append to the app).", "app_id"),
		historyBytes:         d("history_bytes", "What channel histories cost to hold in bytes, by app (in a cluster: as of this node's last append to the app): each event its name, data, the socket_id it excludes and 64 bytes, each channel 512 bytes and five times its name; bounded by HERALD_HISTORY_MAX_BYTES.", "app_id"),
		historyDropped:       d("history_events_dropped_total", "Kept events dropped before their TTL (by this node's appends), by reason: events (past the app's history events), age (past its TTL), bytes (past HERALD_HISTORY_MAX_BYTES), channels (past HERALD_HISTORY_MAX_CHANNELS).", "reason"),
		clusterConsole:       d("cluster_console_events_total", "Debug console events relayed between nodes, by outcome: sent to the nodes watching, dropped past a flush's bounds, received from other nodes.", "outcome"),
		recoveries: d("recoveries_total", "Subscriptions that asked to recover what their connection's previous one missed (the recovery plugin), by outcome: "+
			"recovered (every missed event replayed), refused (a token that does not prove the old subscription, or past the connection's share of resumes), expired (past the app's recovery window), "+
			"gap (the channel's history no longer holds what was missed), unavailable (the history could not be read, or a cluster node, which does not recover yet), off (the app keeps no history or has no recovery window).", "outcome"),
	}
}

// Describe sends every descriptor.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.connections, c.channels, c.subscriptions, c.members, c.triggered, c.opened, c.closed, c.rejected,
		c.clientEvents, c.delivered, c.slow, c.outbox, c.webhookRequests, c.webhookAbandoned,
		c.webhookDropped, c.webhookUnsent, c.pushQueue, c.pushPublishes, c.pushDeliveries, c.pushDuplicates, c.panics, c.rateLimited,
		c.pushPages, c.pushTakenOver, c.clusterUp, c.clusterNodes, c.clusterPublished, c.clusterPublishCalls, c.clusterPublishErrors, c.clusterReceived,
		c.clusterResyncs, c.clusterReaped, c.clusterOutages, c.clusterReplayed, c.clusterConsole, c.publishLimitErrors,
		c.historyEvents, c.historyBytes, c.historyDropped, c.recoveries,
	} {
		ch <- d
	}
}

// Collect reads every source.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	count := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	if h := c.src.Hub; h != nil {
		for _, a := range h.AppStats() {
			gauge(c.connections, float64(a.Connections), a.AppID)
			gauge(c.channels, float64(a.Channels), a.AppID)
			gauge(c.subscriptions, float64(a.Subscriptions), a.AppID)
			gauge(c.members, float64(a.PresenceMembers), a.AppID)
			count(c.triggered, a.Triggered, a.AppID)
		}
		count(c.panics, h.ObserverPanics(), "hub_observer")
		r := h.RecoveryStats()
		count(c.recoveries, r.Recovered, "recovered")
		count(c.recoveries, r.Refused, "refused")
		count(c.recoveries, r.Expired, "expired")
		count(c.recoveries, r.Gap, "gap")
		count(c.recoveries, r.Error, "unavailable")
		count(c.recoveries, r.Off, "off")
	}
	if s := c.src.Sockets; s != nil {
		n := s.Counters()
		count(c.opened, n.ConnectionsOpened-n.HTTPSessionsOpened, "ws")
		count(c.opened, n.HTTPSessionsOpened, "xhr")
		count(c.clientEvents, n.ClientEvents)
		count(c.delivered, n.FramesDelivered)
		for _, cc := range n.Closed {
			count(c.closed, cc.Count, codeLabel(cc.Code))
		}
		for _, cc := range n.Rejected {
			count(c.rejected, cc.Count, codeLabel(cc.Code))
		}
		count(c.slow, s.SlowConsumersClosed())
		count(c.panics, n.Panics, "ws")
		count(c.rateLimited, n.ConnectRateLimited, "ws_connect")
		count(c.rateLimited, n.SubscribeRateLimited, "ws_subscribe")
		count(c.rateLimited, n.AppSubscriptionsCapped, "app_subscriptions")
	}
	if u := c.src.Upgrades; u != nil {
		count(c.panics, u.Panics(), "upgrade")
	}
	if o := c.src.Outbox; o != nil {
		ctx, cancel := context.WithTimeout(context.Background(), outboxTimeout)
		n, err := o.CountWebhookOutbox(ctx)
		cancel()
		if err != nil {
			ch <- prometheus.NewInvalidMetric(c.outbox, err)
		} else {
			gauge(c.outbox, float64(n))
		}
	}
	if w := c.src.Webhooks; w != nil {
		st := w.Stats()
		count(c.webhookRequests, st.Delivered, "delivered")
		count(c.webhookRequests, st.Failed, "failed")
		count(c.webhookAbandoned, st.Abandoned)
		count(c.webhookDropped, st.Dropped)
		count(c.webhookUnsent, st.OverCap, "over_cap")
		count(c.webhookUnsent, st.Expired, "expired")
		count(c.webhookUnsent, st.Unwritten, "unwritten")
		count(c.panics, st.Panics, "webhook")
	}
	if p := c.src.Push; p != nil {
		pc := p.PushCounters()
		gauge(c.pushQueue, float64(pc.QueueDepth))
		count(c.pushPublishes, pc.Publishes)
		count(c.pushDuplicates, pc.Duplicates)
		count(c.pushPages, pc.PagesClaimed-pc.PagesTakenOver, "next")
		count(c.pushPages, pc.PagesTakenOver, "taken_over")
		count(c.pushTakenOver, pc.TakenOverDeliveries)
		for _, d := range pc.Deliveries {
			count(c.pushDeliveries, d.Count, d.Gateway, d.Outcome)
		}
		count(c.panics, pc.Panics, "push")
	}
	if cl := c.src.Cluster; cl != nil {
		st := cl.Stats()
		up := 0.0
		if st.Up {
			up = 1
		}
		gauge(c.clusterUp, up)
		gauge(c.clusterNodes, float64(st.Nodes))
		count(c.clusterPublished, st.Published)
		count(c.clusterPublishCalls, st.PublishCalls)
		count(c.clusterPublishErrors, st.PublishErrors)
		count(c.clusterReceived, st.Received)
		count(c.clusterResyncs, st.Resyncs)
		count(c.clusterReaped, st.Reaped)
		count(c.clusterOutages, st.Outages)
		count(c.clusterReplayed, st.Replayed)
		count(c.clusterConsole, st.Console.Sent, "sent")
		count(c.clusterConsole, st.Console.Dropped, "dropped")
		count(c.clusterConsole, st.Console.Received, "received")
		count(c.panics, st.Panics, "cluster")
	}
	if p := c.src.Publish; p != nil {
		st := p.LimitStats()
		count(c.rateLimited, int64(st.Refused), "publish_api")
		count(c.publishLimitErrors, int64(st.DatabaseErrors))
	}
	if h := c.src.History; h != nil {
		st := h.Stats()
		for _, a := range st.Apps {
			gauge(c.historyEvents, float64(a.Events), a.AppID)
			gauge(c.historyBytes, float64(a.Bytes), a.AppID)
		}
		for r, n := range st.Dropped {
			count(c.historyDropped, n, eventlog.Reason(r).String())
		}
	}
	if a := c.src.Anon; a != nil {
		count(c.rateLimited, int64(a.Stats().Refused), "anon_push_api")
	}
}

func codeLabel(code int) string {
	if code == ws.CloseCodeOther {
		return "other"
	}
	return strconv.Itoa(code)
}
