package push

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/internal/testkit"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

// BenchmarkSmallPublishes measures the dispatcher's work per publish when
// publishes are small: each goes to one interest with three devices, one per
// gateway, through senders that accept at once. Per publish: listing and
// starting it, reading its targets, encoding the payloads, three sends, and
// recording its pages. The figures are per publish, from storing it to its
// last page recorded.
//
//   - Published: the publish is handed over with its payload parsed, as the
//     Publish API does; the dispatcher parses nothing.
//   - Notify: only told that a publish was stored, the dispatcher parses the
//     stored payload (as after a restart).
func BenchmarkSmallPublishes(b *testing.B) {
	b.Run("Published", func(b *testing.B) { benchmarkSmallPublishes(b, true) })
	b.Run("Notify", func(b *testing.B) { benchmarkSmallPublishes(b, false) })
}

func benchmarkSmallPublishes(b *testing.B, handOver bool) {
	ctx := context.Background()
	db := testdb.Open(b, storage.Open, testdb.SQLite(b))
	var writes, reads atomic.Int64
	db.ObserveTransactions(func(kind string, _ time.Duration) {
		if kind == "write" {
			writes.Add(1)
		} else {
			reads.Add(1)
		}
	})
	in, err := db.CreateInstance(ctx, storage.Instance{ID: testInstance, SecretKey: "secret", Enabled: true})
	if err != nil {
		b.Fatal(err)
	}
	var batch []storage.DeviceImport
	for i, pl := range platforms {
		d := storage.Device{ID: storage.NewDeviceID(pl), InstanceID: in.ID, Platform: pl, Token: fmt.Sprintf("tok-%d", i), BundleIdentifier: "com.example"}
		batch = append(batch, storage.DeviceImport{Device: d, Interests: []string{"news"}})
	}
	if err := db.ImportDevices(ctx, batch); err != nil {
		b.Fatal(err)
	}
	var sends atomic.Int64
	accept := senderFunc(func(context.Context, storage.Delivery, *Prepared) Result { sends.Add(1); return sent() })
	d := New(db, instanceMap{in.ID: &in}, zap.NewNop(), Options{Senders: func(*storage.Instance) (map[storage.Platform]Sender, error) {
		return map[storage.Platform]Sender{storage.PlatformAPNs: accept, storage.PlatformFCM: accept, storage.PlatformWeb: accept}, nil
	}})
	if err := d.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	payload := json.RawMessage(`{"apns":{"aps":{"alert":{"title":"Hi","body":"A benchmark"}},"data":{"k":"v"}},` +
		`"fcm":{"notification":{"title":"Hi","body":"A benchmark"},"data":{"k":"v"}},` +
		`"web":{"notification":{"title":"Hi","body":"A benchmark"},"data":{"k":"v"}}}`)
	parsed, err := ParseStoredPayload(payload)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	writes.Store(0)
	reads.Store(0)
	cpu := testkit.CPU()
	for i := range b.N {
		p, err := db.CreatePublish(ctx, storage.Publish{ID: fmt.Sprintf("pubid-%d", i), InstanceID: in.ID,
			TargetKind: storage.TargetInterests, Targets: []string{"news"}, Payload: payload}, 0, time.Time{})
		if err != nil {
			b.Fatal(err)
		}
		if handOver {
			d.Published(p.ID, parsed)
		} else {
			d.Notify()
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		left, err := db.UnresolvedPublishes(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		if len(left) == 0 && sends.Load() == int64(3*b.N) && d.InFlight() == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d sends after a minute", sends.Load(), 3*b.N)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "publishes/s")
	// Transactions per publish, its own CreatePublish's included: the
	// database's work, which a loaded machine does not blur.
	b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/publish")
	b.ReportMetric(float64(reads.Load())/float64(b.N), "reads/publish")
	b.ReportMetric(float64((testkit.CPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/publish")
}
