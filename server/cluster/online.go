package cluster

import (
	"time"

	"github.com/heraldrt/herald/server/hub"
)

// SignedIn reports whether userID has a signed-in connection of appID
// anywhere in the cluster. This node's own connections are looked up in the
// hub; the others' in Redis (P us:<app>, on the first shard, where every
// sign-in is counted), through the queue of this node's changes, so that
// the answer comes after every sign-in and sign-out this node made before
// the call: a user whose last connection closed here a moment ago is not
// reported online because that sign-out had not reached Redis yet. Another
// node's changes count from when that node has written them, a few
// milliseconds after they happened. An error (hub.ErrUnavailable) means
// Redis did not answer within queryTimeout.
func (c *member) SignedIn(appID, userID string) (bool, error) {
	if c.hub.SignedIn(appID, userID) {
		return true, nil
	}
	if !c.healthy.Load() {
		return false, hub.ErrUnavailable
	}
	q := &signedInQuery{app: appID, user: userID, answer: make(chan signedInAnswer, 1)}
	c.ops.push(op{signedIn: q})
	timeout := time.NewTimer(queryTimeout)
	defer timeout.Stop()
	select {
	case a := <-q.answer:
		if a.err != nil {
			return false, unavailable(a.err)
		}
		return a.online, nil
	case <-timeout.C:
		return false, hub.ErrUnavailable
	case <-c.ctx.Done():
		return false, hub.ErrUnavailable
	}
}

// signedInQuery is SignedIn's question, queued among the node's changes.
type signedInQuery struct {
	app, user string
	answer    chan signedInAnswer // buffered: the first answer stays, later ones are dropped
}

type signedInAnswer struct {
	online bool
	err    error
}

// call reads the user's count of signed-in connections in the cluster.
func (q *signedInQuery) call(c *member) *call {
	return &call{args: []any{"HEXISTS", c.key("us:", q.app), q.user}}
}

// reply answers the query with the result of its call, unless it has been
// answered already.
func (q *signedInQuery) reply(val any, err error) {
	n, _ := val.(int64)
	select {
	case q.answer <- signedInAnswer{online: err == nil && n == 1, err: err}:
	default:
	}
}

// failQueries answers the queries among ops that have no answer yet with
// hub.ErrUnavailable: the batch that held them failed.
func failQueries(ops []op) {
	for _, o := range ops {
		if o.signedIn != nil {
			o.signedIn.reply(nil, hub.ErrUnavailable)
		}
	}
}
