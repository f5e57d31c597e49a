package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel. HERALD_REDIS_URL=redis-sentinel://[:password@]host:port[,host:port…]/<master>
// names the Sentinels watching a Redis primary and the primary's name: the
// client (go-redis's failover client) asks them where the primary is, and
// again whenever its connections fail or the primary turns read-only, so
// the node follows a promotion by itself. The password is the primary's;
// the Sentinels are asked without one.
//
// A promoted replica keeps the state's generation but may lack the last
// writes of the primary that died (replication is asynchronous): so, as
// after any outage, each node rebuilds its record from its hub, and
// publishes again what it published in the replay window (the readers drop
// what they had), so that a trigger answered 200 is delivered all the same.

const sentinelScheme = "redis-sentinel://"

// sentinelOptions parses a redis-sentinel:// URL into the failover
// client's options. Errors name the setting and never print the password.
func sentinelOptions(raw string) (*redis.FailoverOptions, error) {
	bad := func(why string) error { return fmt.Errorf("HERALD_REDIS_URL: %s", why) }
	rest := strings.TrimPrefix(raw, sentinelScheme)
	hosts, master, ok := strings.Cut(rest, "/")
	// A master name with an @ is the rest of a password holding a /, cut
	// there: it is refused without being shown.
	if !ok || master == "" || strings.ContainsAny(master, "/@") {
		return nil, bad("a redis-sentinel:// URL ends with /<master name>: redis-sentinel://[:password@]host:port[,host:port…]/<master>")
	}
	if strings.ContainsAny(master, "?#") {
		return nil, bad("a redis-sentinel:// URL takes no query or fragment")
	}
	password, addrs, err := seedHosts(hosts, sentinelScheme, "a Sentinel's")
	if err != nil {
		return nil, err
	}
	fo := quick(&redis.UniversalOptions{MasterName: master, Addrs: addrs, Password: password}).Failover()
	if err := checkSentinels(fo); err != nil {
		return nil, err
	}
	return fo, nil
}

// checkSentinels asks the Sentinels for the master: the start stops when
// one that answers does not know it (a wrong name). None answering is an
// outage, not a bad setting: the node starts outside the cluster and joins
// when they answer, as with one Redis.
func checkSentinels(fo *redis.FailoverOptions) error {
	for _, addr := range fo.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := sc.GetMasterAddrByName(ctx, fo.MasterName).Result()
		cancel()
		sc.Close()
		switch {
		case err == nil:
			return nil
		case isNil(err) || redis.HasErrorPrefix(err, "IDONTKNOW"):
			return fmt.Errorf("HERALD_REDIS_URL: the Sentinel at %s does not know a master named %q", addr, fo.MasterName)
		}
		var nerr net.Error
		if !errors.As(err, &nerr) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("HERALD_REDIS_URL: the Sentinel at %s: %v", addr, err)
		}
	}
	return nil
}
