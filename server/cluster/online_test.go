package cluster

import (
	"errors"
	"testing"

	"github.com/heraldrt/herald/server/hub"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

func TestSignedInAcrossNodes(t *testing.T) {
	onEachTopology(t, testSignedInAcrossNodes)
}

func testSignedInAcrossNodes(t *testing.T, cluster startCluster) {
	ns := cluster(3)
	signedIn := func(n *node, user string) bool {
		t.Helper()
		on, err := n.hub.State().SignedIn("app", user)
		if err != nil {
			t.Fatalf("SignedIn(%s) on %s: %v", user, n.c.ID(), err)
		}
		return on
	}
	everywhere := func(user string, want bool) func() bool {
		return func() bool {
			for _, n := range ns {
				if signedIn(n, user) != want {
					return false
				}
			}
			return true
		}
	}

	// u signs in twice on the second node: online on every node.
	u1, u2 := ns[1].connect("app"), ns[1].connect("app")
	for _, c := range []*client{u1, u2} {
		if err := ns[1].hub.SignIn(c.conn, "u", nil); err != nil {
			t.Fatal(err)
		}
	}
	if !signedIn(ns[1], "u") {
		t.Fatal("u is not online on the node it signed in on")
	}
	wait.Until(t, "u is online on every node", everywhere("u", true))
	// Connected and subscribed is not signed in; nor is u of another app.
	v := ns[2].connect("app")
	v.subscribe("news", nil)
	v.wait("news", "pusher_internal:subscription_succeeded")
	if signedIn(ns[0], "v") || signedIn(ns[2], "v") {
		t.Fatal("v is online without signing in")
	}
	if on, err := ns[0].hub.State().SignedIn("other", "u"); err != nil || on {
		t.Fatalf("u of another app: %v %v, want offline", on, err)
	}

	// One of u's connections leaves: still online; the last: offline.
	ns[1].hub.Remove(u1.conn)
	if !signedIn(ns[1], "u") || !signedIn(ns[0], "u") {
		t.Fatal("u is offline with a connection left")
	}
	ns[1].hub.Remove(u2.conn)
	// On its own node at once: the query follows the node's sign-out to
	// Redis instead of reading what Redis held before it.
	if signedIn(ns[1], "u") {
		t.Fatal("u is online on its own node after its last connection left")
	}
	wait.Until(t, "u is offline on every node", everywhere("u", false))

	// The same from a node that had written the sign-in to Redis
	// before: its sign-out is not overtaken by the query.
	for range 5 {
		w := ns[0].connect("app")
		if err := ns[0].hub.SignIn(w.conn, "w", nil); err != nil {
			t.Fatal(err)
		}
		wait.Until(t, "w is online on the other nodes", func() bool { return signedIn(ns[2], "w") })
		ns[0].hub.Remove(w.conn)
		if signedIn(ns[0], "w") {
			t.Fatal("w is online on its own node after it left")
		}
	}
}

func TestSignedInWhileRedisIsDown(t *testing.T) {
	rs := testredis.Start(t)
	ns := cluster(t, rs, 2)
	local := ns[0].connect("app")
	if err := ns[0].hub.SignIn(local.conn, "here", nil); err != nil {
		t.Fatal(err)
	}
	rs.Stop()
	wait.Until(t, "the node sees Redis down", func() bool { return !ns[0].c.Stats().Up })
	if _, err := ns[0].hub.State().SignedIn("app", "elsewhere"); !errors.Is(err, hub.ErrUnavailable) {
		t.Fatalf("SignedIn of a user not on this node while Redis is down: %v, want ErrUnavailable", err)
	}
	// A user signed in on this node is online whatever Redis says.
	if on, err := ns[0].hub.State().SignedIn("app", "here"); err != nil || !on {
		t.Fatalf("SignedIn of a user on this node while Redis is down: %v %v, want online", on, err)
	}
}
