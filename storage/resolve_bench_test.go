package storage

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/heraldrt/herald/storage/testdb"
	"github.com/heraldrt/herald/storage/testpg"
)

// BenchmarkResolveInterest1M reads every target of a publish to one
// interest with 1,000,000 subscribed devices (a third per platform), a page
// of 1,000 at a time per platform stream, as the push resolver does, on
// each database, and reports the time for all of them.
//
//	go test -run '^$' -bench ResolveInterest1M -benchtime 1x ./storage/
func BenchmarkResolveInterest1M(b *testing.B) {
	b.Run("SQLite", func(b *testing.B) { benchmarkResolve(b, testdb.SQLite(b)) })
	b.Run("PostgreSQL", func(b *testing.B) { benchmarkResolve(b, testpg.Start(b)) })
}

func benchmarkResolve(b *testing.B, dsn string) {
	const devices, page = 1_000_000, 1000
	ctx := context.Background()
	db := testdb.Open(b, Open, dsn)
	if _, err := db.CreateInstance(ctx, testInstance(instanceID)); err != nil {
		b.Fatal(err)
	}
	platforms := []Platform{PlatformAPNs, PlatformFCM, PlatformWeb}
	seeded := time.Now()
	batch := make([]DeviceImport, 0, 10000)
	for i := range devices {
		pl := platforms[i%3]
		batch = append(batch, DeviceImport{
			Device:    Device{ID: NewDeviceID(pl), InstanceID: instanceID, Platform: pl, Token: fmt.Sprintf("token-%d", i)},
			Interests: []string{"everyone"},
		})
		if len(batch) == cap(batch) || i == devices-1 {
			if err := db.ImportDevices(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	b.Logf("seeded %d devices in %v", devices, time.Since(seeded).Round(time.Millisecond))
	p := Publish{ID: "pub-1m", InstanceID: instanceID, TargetKind: TargetInterests, Targets: []string{"everyone"}}
	wanted := map[Platform]bool{PlatformAPNs: true, PlatformFCM: true, PlatformWeb: true}
	b.ResetTimer()
	for range b.N {
		n := 0
		for _, pl := range platforms {
			cursor := ""
			for {
				targets, next, last, err := db.PublishTargets(ctx, p, pl, wanted, cursor, page)
				if err != nil {
					b.Fatal(err)
				}
				n += len(targets)
				cursor = next
				if last {
					break
				}
			}
		}
		if n != devices {
			b.Fatalf("resolved %d targets, want %d", n, devices)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/resolve")
}
