package redisconn

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/heraldrt/herald/server/internal/testcert"
	"github.com/heraldrt/herald/server/internal/testredis"
	"github.com/heraldrt/herald/server/internal/wait"
)

// Every form of HERALD_REDIS_URL, read by Parse: the shards it names and
// each one's settings, the URLs as the node shows them, and the clients
// built from them, which give up on a call after 2 s and one retry, each
// try one dial (a trigger waits on Redis, and a Redis that does not answer
// must turn into a 503 quickly; the library's defaults are 5 s dials, 3 s
// reads, 3 retries and 5 dials a try). A bad URL or CA file is refused
// naming the setting (and the shard when there are several), never with
// any part of the password.
func TestParseEveryForm(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	testcert.NewCA(t).WriteCert(t, ca)
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("no certificate here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// shard is what a test expects of one parsed shard.
	type shard struct {
		kind                   Kind
		addrs                  string // comma-separated
		user, password, master string
		db                     int
		tls, privateCA         bool
	}
	tests := []struct {
		name, url, caFile string
		want              []shard
		shown             []string // RedactAll
		wantErr           string   // the error's start
		pw                string   // what no message may hold; "s3cret" when empty
	}{
		{name: "Redis", url: "redis://:s3cret@127.0.0.1:6379/2",
			want: []shard{{kind: Single, addrs: "127.0.0.1:6379", password: "s3cret", db: 2}}, shown: []string{"redis://127.0.0.1:6379/2"}},
		{name: "RedisUser", url: "redis://user:s3cret@h:1/0",
			want: []shard{{kind: Single, addrs: "h:1", user: "user", password: "s3cret"}}, shown: []string{"redis://h:1/0"}},
		{name: "Rediss", url: "rediss://:s3cret@127.0.0.1:6380",
			want: []shard{{kind: Single, addrs: "127.0.0.1:6380", password: "s3cret", tls: true}}, shown: []string{"rediss://127.0.0.1:6380"}},
		{name: "RedissPrivateCA", url: "rediss://:s3cret@127.0.0.1:6380", caFile: ca,
			want: []shard{{kind: Single, addrs: "127.0.0.1:6380", password: "s3cret", tls: true, privateCA: true}}, shown: []string{"rediss://127.0.0.1:6380"}},
		{name: "Shards", url: "redis://:s3cret@127.0.0.1:6379/0, rediss://:s3cret@127.0.0.1:6380/1",
			want: []shard{
				{kind: Single, addrs: "127.0.0.1:6379", password: "s3cret"},
				{kind: Single, addrs: "127.0.0.1:6380", password: "s3cret", db: 1, tls: true},
			}, shown: []string{"redis://127.0.0.1:6379/0", "rediss://127.0.0.1:6380/1"}},
		{name: "Sentinel", url: "redis-sentinel://:s3cret@h1:1,h2:2/mymaster",
			want: []shard{{kind: Sentinel, addrs: "h1:1,h2:2", password: "s3cret", master: "mymaster"}}, shown: []string{"redis-sentinel://h1:1,h2:2/mymaster"}},
		// A seeds URL's password is all before the last @, and may hold one.
		{name: "SentinelPasswordWithAt", url: "redis-sentinel://:p@ss@h1:1/m", pw: "p@ss",
			want: []shard{{kind: Sentinel, addrs: "h1:1", password: "p@ss", master: "m"}}, shown: []string{"redis-sentinel://h1:1/m"}},
		{name: "SentinelEmptyUserInfo", url: "redis-sentinel://@h1:1/m",
			want: []shard{{kind: Sentinel, addrs: "h1:1", master: "m"}}, shown: []string{"redis-sentinel://h1:1/m"}},
		{name: "RedisCluster", url: "redis-cluster://:s3cret@h1:1,h2:2",
			want: []shard{{kind: Cluster, addrs: "h1:1,h2:2", password: "s3cret"}}, shown: []string{"redis-cluster://h1:1,h2:2"}},
		{name: "RedisClusterSlash", url: "redis-cluster://h1:1/",
			want: []shard{{kind: Cluster, addrs: "h1:1"}}, shown: []string{"redis-cluster://h1:1/"}},

		// redis:// and rediss://, and lists of them.
		{name: "NotRedisShard", url: "redis://:s3cret@127.0.0.1:6379/0,http://:s3cret@127.0.0.1:6380", wantErr: "HERALD_REDIS_URL: shard 2 of 2 (http://127.0.0.1:6380) must be a redis:// or rediss:// URL"},
		{name: "NotRedis", url: "http://:s3cret@127.0.0.1:6380", wantErr: "HERALD_REDIS_URL: the URL (http://127.0.0.1:6380) must be a redis:// or rediss:// URL"},
		{name: "EmptyShard", url: "redis://:s3cret@127.0.0.1:6379/0,", wantErr: "HERALD_REDIS_URL: shard 2 of 2 is empty"},
		{name: "BadPort", url: "redis://:s3cret@127.0.0.1:6379/0,redis://:s3cret@host:port:x/0", wantErr: "HERALD_REDIS_URL, shard 2 of 2: "},
		{name: "BadDBOfThree", url: "redis://:s3cret@127.0.0.1:6379/0,redis://:s3cret@127.0.0.1:6379/x,redis://127.0.0.1:6379/0", wantErr: "HERALD_REDIS_URL, shard 2 of 3: "},
		{name: "BadDB", url: "redis://:s3cret@127.0.0.1:6379/notadb", wantErr: "HERALD_REDIS_URL: redis://127.0.0.1:6379/notadb: "},
		{name: "BadHost", url: "redis://:s3cret@[::1/0", wantErr: "HERALD_REDIS_URL: "},
		// Passwords holding an unencoded / ? # or , and one with its host
		// forgotten: the parsers would show a part of them.
		{name: "PasswordWithSlash", url: "redis://:12/s3cret@127.0.0.1:6379", wantErr: "HERALD_REDIS_URL: the URL cannot be read whole", pw: "12/s3cret"},
		{name: "PasswordWithQuery", url: "redis://:123?s3cret@127.0.0.1:6379", wantErr: "HERALD_REDIS_URL: the URL cannot be read whole", pw: "123?s3cret"},
		{name: "PasswordWithHash", url: "redis://user:123#s3cret@127.0.0.1:6379", wantErr: "HERALD_REDIS_URL: the URL cannot be read whole", pw: "123#s3cret"},
		{name: "PasswordWithComma", url: "redis://:12,s3cret@127.0.0.1:6379", wantErr: "HERALD_REDIS_URL: shard 1 of 2 cannot be read whole", pw: "12,s3cret"},
		{name: "PasswordWithCommaAfterLetters", url: "redis://:ab,s3cret@127.0.0.1:6379", wantErr: "HERALD_REDIS_URL: shard 2 of 2 must be a redis:// or rediss:// URL (a comma"},
		{name: "HostForgotten", url: "redis://:s3cret", wantErr: "HERALD_REDIS_URL: (unparsable URL): invalid port"},
		{name: "DigitsHostForgotten", url: "redis://:123456", wantErr: "HERALD_REDIS_URL: the URL cannot be read whole", pw: "123456"},

		// redis-sentinel://.
		{name: "SentinelThenRedis", url: "redis-sentinel://:s3cret@h:1/herald,redis://:s3cret@127.0.0.1:6379", wantErr: "HERALD_REDIS_URL: a redis-sentinel:// URL cannot be mixed"},
		{name: "RedisThenSentinel", url: "redis://:s3cret@127.0.0.1:6379,redis-sentinel://:s3cret@h:1/herald", wantErr: "HERALD_REDIS_URL: a redis-sentinel:// URL cannot be mixed"},
		{name: "SentinelNoMaster", url: "redis-sentinel://:s3cret@h:1", wantErr: "HERALD_REDIS_URL: a redis-sentinel:// URL ends with /<master name>"},
		{name: "SentinelQuery", url: "redis-sentinel://:s3cret@h:1/m?x=1", wantErr: "HERALD_REDIS_URL: a redis-sentinel:// URL takes no query"},
		{name: "SentinelNoHost", url: "redis-sentinel://:s3cret@h:1,nohost/herald", wantErr: `HERALD_REDIS_URL: "nohost" is not a Sentinel's host:port`},
		{name: "SentinelUser", url: "redis-sentinel://user:s3cret@h:1/herald", wantErr: "HERALD_REDIS_URL: a redis-sentinel:// URL takes a password only"},
		// No @ before the hosts: the rest of a password holding a /.
		{name: "SentinelPasswordWithSlash", url: "redis-sentinel://h:1/s3cret@127.0.0.1:26379", wantErr: "HERALD_REDIS_URL: a redis-sentinel:// URL ends with /<master name>"},
		{name: "SentinelHostForgotten", url: "redis-sentinel://:s3cret/herald", wantErr: "HERALD_REDIS_URL: host 1 of 1 is not a Sentinel's host:port"},

		// redis-cluster://.
		{name: "RedisClusterThenRedis", url: "redis-cluster://:s3cret@127.0.0.1:6379,redis://:s3cret@127.0.0.1:6380", wantErr: "HERALD_REDIS_URL: a redis-cluster:// URL cannot be mixed"},
		{name: "RedisThenRedisCluster", url: "redis://:s3cret@127.0.0.1:6380,redis-cluster://:s3cret@127.0.0.1:6379", wantErr: "HERALD_REDIS_URL: a redis-cluster:// URL cannot be mixed"},
		{name: "RedisClusterDB", url: "redis-cluster://:s3cret@127.0.0.1:6379/0", wantErr: "HERALD_REDIS_URL: a redis-cluster:// URL is redis-cluster://"},
		{name: "RedisClusterQuery", url: "redis-cluster://:s3cret@127.0.0.1:6379?x=1", wantErr: "HERALD_REDIS_URL: a redis-cluster:// URL is redis-cluster://"},
		{name: "RedisClusterNoHost", url: "redis-cluster://:s3cret@127.0.0.1:6379,nohost", wantErr: `HERALD_REDIS_URL: "nohost" is not a Redis Cluster node's host:port`},
		{name: "RedisClusterUser", url: "redis-cluster://user:s3cret@127.0.0.1:6379", wantErr: "HERALD_REDIS_URL: a redis-cluster:// URL takes a password only"},
		{name: "RedisClusterEmpty", url: "redis-cluster://", wantErr: "HERALD_REDIS_URL: host 1 of 1 is not a Redis Cluster node's host:port"},
		{name: "RedisClusterHostForgotten", url: "redis-cluster://:s3cret", wantErr: "HERALD_REDIS_URL: host 1 of 1 is not a Redis Cluster node's host:port"},
		{name: "RedisClusterPasswordWithSlash", url: "redis-cluster://:s3cret/x@127.0.0.1:6379", wantErr: "HERALD_REDIS_URL: a redis-cluster:// URL is redis-cluster://"},

		// HERALD_REDIS_CA_FILE goes with a rediss:// URL and holds a
		// certificate.
		{name: "CAWithRedis", url: "redis://127.0.0.1:6379/0", caFile: ca, wantErr: "HERALD_REDIS_CA_FILE needs a rediss:// HERALD_REDIS_URL: it is the CA"},
		{name: "CAWithSentinel", url: "redis-sentinel://h:1/m", caFile: ca, wantErr: "HERALD_REDIS_CA_FILE needs a rediss:// HERALD_REDIS_URL: Sentinel"},
		{name: "CAWithRedisCluster", url: "redis-cluster://h:1", caFile: ca, wantErr: "HERALD_REDIS_CA_FILE needs a rediss:// HERALD_REDIS_URL: a Redis Cluster"},
		{name: "CAMissing", url: "rediss://127.0.0.1:6379/0", caFile: filepath.Join(dir, "none.pem"), wantErr: "HERALD_REDIS_CA_FILE: open "},
		{name: "CAWithoutCertificate", url: "rediss://127.0.0.1:6379/0", caFile: empty, wantErr: "HERALD_REDIS_CA_FILE: " + empty + " holds no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pw := tt.pw
			if pw == "" {
				pw = "s3cret"
			}
			shards, err := Parse(tt.url, tt.caFile)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse(%q): accepted", tt.url)
				}
				if !strings.HasPrefix(err.Error(), tt.wantErr) || strings.Contains(err.Error(), pw) {
					t.Fatalf("Parse(%q): %v, want it to start %q, without the password", tt.url, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.url, err)
			}
			if shown := RedactAll(tt.url); !slices.Equal(shown, tt.shown) {
				t.Errorf("RedactAll(%q) = %q, want %q", tt.url, shown, tt.shown)
			}
			if len(shards) != len(tt.want) {
				t.Fatalf("%d shards, want %d", len(shards), len(tt.want))
			}
			for i, s := range shards {
				want := tt.want[i]
				var got shard
				var timeouts [5]any
				rdb := s.Client(ClientOptions{})
				defer rdb.Close()
				switch s.Kind {
				case Single:
					o := rdb.(*redis.Client).Options()
					got = shard{kind: Single, addrs: o.Addr, user: o.Username, password: o.Password, db: o.DB, tls: o.TLSConfig != nil}
					if got.tls {
						got.privateCA = o.TLSConfig.RootCAs != nil
						if o.TLSConfig.MinVersion < tls.VersionTLS12 {
							t.Errorf("shard %d: TLS from version %x, want 1.2 at least", i+1, o.TLSConfig.MinVersion)
						}
					}
					timeouts = [5]any{o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries, o.DialerRetries}
				case Sentinel:
					fo := s.failover
					got = shard{kind: Sentinel, addrs: strings.Join(fo.SentinelAddrs, ","), password: fo.Password, master: fo.MasterName}
					o := rdb.(*redis.Client).Options()
					timeouts = [5]any{o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries, o.DialerRetries}
				case Cluster:
					o := rdb.(*redis.ClusterClient).Options()
					got = shard{kind: Cluster, addrs: strings.Join(o.Addrs, ","), password: o.Password}
					timeouts = [5]any{o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries, o.DialerRetries}
				}
				if got != want {
					t.Errorf("shard %d: %+v, want %+v", i+1, got, want)
				}
				if want := [5]any{2 * time.Second, 2 * time.Second, 2 * time.Second, 1, 1}; timeouts != want {
					t.Errorf("shard %d: dial, read and write timeouts, retries and dials a try %v, want %v", i+1, timeouts, want)
				}
			}
		})
	}
}

// A CA file adds its certificates to the system's roots for the connection
// to Redis; it does not replace them (a Redis with a certificate of a public
// authority is still trusted).
func TestTheRedisCAFileAddsToTheSystemRoots(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ca.pem")
	testcert.NewCA(t).WriteCert(t, file)
	got, err := roots(file)
	if err != nil {
		t.Fatal(err)
	}
	want, err := x509.SystemCertPool()
	if err != nil {
		want = x509.NewCertPool()
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want.AppendCertsFromPEM(pem)
	if !got.Equal(want) {
		t.Fatal("the roots for Redis are not the system's and the CA file's")
	}
}

// Check asks a Sentinel group or a Redis Cluster what the start needs to
// know, and stops it only on an answer that says no: a Sentinel that does
// not know the master, a server that is no Sentinel or no Redis Cluster
// node, a Redis Cluster that does not serve every slot. The first that
// answers decides, after those that do not; none answering is an outage,
// not a bad setting. One Redis has nothing to check.
func TestCheckStopsTheStartOnlyOnAnAnswerThatSaysNo(t *testing.T) {
	plain := testredis.Start(t)
	sentinel := testredis.StartSentinel(t, "herald", plain.Addr())
	unjoined := testredis.StartClusterNode(t)
	full := testredis.StartCluster(t, 3)
	gone := testredis.Start(t)
	gone.Stop()
	down := gone.Addr()
	for _, c := range []struct {
		url, want string // want: what the error says; empty, accepted
	}{
		{"redis://" + plain.Addr(), ""},
		{"redis://" + down, ""},
		{"redis-sentinel://" + sentinel.Addr() + "/herald", ""},
		{"redis-sentinel://" + down + "," + sentinel.Addr() + "/nosuchmaster", `the Sentinel at ` + sentinel.Addr() + ` does not know a master named "nosuchmaster"`},
		{"redis-sentinel://" + plain.Addr() + "/herald", "the Sentinel at " + plain.Addr() + ": "},
		{"redis-sentinel://" + down + "/herald", ""},
		{"redis-cluster://" + down + "," + full.Nodes[0].Addr(), ""},
		{"redis-cluster://" + down + "," + unjoined.Addr(), "the Redis Cluster of the node at " + unjoined.Addr() + " serves 0 of the 16384 slots (cluster_state:fail)"},
		{"redis-cluster://" + plain.Addr(), "the Redis Cluster node at " + plain.Addr() + ": "},
		{"redis-cluster://" + down, ""},
	} {
		shards, err := Parse(c.url, "")
		if err != nil {
			t.Fatal(err)
		}
		err = shards[0].Check()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.url, err)
		case c.want == "":
		case err == nil:
			t.Errorf("%s: accepted, want %q", c.url, c.want)
		case !strings.HasPrefix(err.Error(), "HERALD_REDIS_URL: "+c.want):
			t.Errorf("%s: %v, want it to say %q", c.url, err, c.want)
		}
	}
}

// A client given OnNewServer reports another Redis server behind its
// address, with its run_id and the one before, once: not at its first
// connection, not when it connects again to the same server, and not for
// the Sentinels a failover client asks for the primary.
func TestAClientReportsAnotherServerBehindItsAddress(t *testing.T) {
	type change struct{ runID, was string }
	client := func(t *testing.T, url string) (redis.UniversalClient, func() []change) {
		shards, err := Parse(url, "")
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var seen []change
		rdb := shards[0].Client(ClientOptions{OnNewServer: func(runID, was string) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, change{runID, was})
		}})
		t.Cleanup(func() { rdb.Close() })
		return rdb, func() []change {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(seen)
		}
	}
	runID := func(rdb redis.UniversalClient) string {
		return InfoValue(rdb.Info(t.Context(), "server").Val(), "run_id")
	}

	t.Run("one Redis", func(t *testing.T) {
		rs := testredis.Start(t)
		rdb, seen := client(t, rs.URL())
		first := runID(rdb)
		// The client's connection is closed (its own CLIENT KILL): its
		// next command connects again, to the same server.
		if err := rdb.ClientKillByFilter(t.Context(), "TYPE", "normal", "SKIPME", "no").Err(); err != nil {
			t.Fatal(err)
		}
		if got := runID(rdb); got != first || len(seen()) != 0 {
			t.Fatalf("connected again to %q (was %q): reported %v", got, first, seen())
		}
		rs.Restart()
		wait.Until(t, "the client reaches the restarted server", func() bool { return rdb.Ping(t.Context()).Err() == nil })
		if want := []change{{runID(rdb), first}}; !slices.Equal(seen(), want) {
			t.Fatalf("reported %v, want %v", seen(), want)
		}
	})

	t.Run("Sentinel", func(t *testing.T) {
		primary := testredis.Start(t)
		sentinel := testredis.StartSentinel(t, "herald", primary.Addr())
		rdb, seen := client(t, "redis-sentinel://"+sentinel.Addr()+"/herald")
		if err := rdb.Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		if got := seen(); len(got) != 0 {
			t.Fatalf("a Sentinel and its primary taken for a change of server: %v", got)
		}
	})
}

// KeySlot is the slot Redis gives a key (as CLUSTER KEYSLOT answers):
// CRC16 modulo 16384, "foo"'s CRC being past it.
func TestKeySlotIsRedisSlot(t *testing.T) {
	for key, want := range map[string]uint16{"": 0, "foo": 12182, "bar": 5061, "hello": 866, "123456789": 12739, "s0.0": 4022} {
		if got := KeySlot(key); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// The Redis client's lines go to the logger Log was given last, at debug
// level, and to none once it is released; a logger that does not log
// debug lines gets none.
func TestTheClientsLinesGoToTheNewestLogger(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	release := Log(zap.New(core))
	quiet, quietLogs := observer.New(zapcore.InfoLevel)
	say := func(line string) { printer{}.Printf(t.Context(), "%s", line) }
	say("one")
	releaseQuiet := Log(zap.New(quiet))
	say("two")
	release() // not the newest: changes nothing
	say("three")
	releaseQuiet()
	say("four")
	var got []string
	for _, e := range logs.All() {
		if e.Level != zapcore.DebugLevel {
			t.Errorf("%q at %v, want debug", e.Message, e.Level)
		}
		got = append(got, e.Message)
	}
	if !slices.Equal(got, []string{"one"}) || quietLogs.Len() != 0 {
		t.Fatalf("lines %q to the debug logger and %d to the quiet one, want [one] and none", got, quietLogs.Len())
	}
}
