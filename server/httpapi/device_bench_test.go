package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/storage"
)

// BenchmarkRegisterDevice measures FCM device registrations through the gin
// engine in process (content-type and instance checks, JSON decoding,
// validation, one SQLite write transaction, the response), each with a new
// token, on a database in a temporary directory. Parallel runs show what the
// single writer connection sustains under concurrent clients.
func BenchmarkRegisterDevice(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := "Serial"
		if parallel {
			name = "Parallel"
		}
		b.Run(name, func(b *testing.B) {
			engine := newPushEngine(b, openPushDB(b), zap.NewNop(), nil)
			target := "/device_api/v1/instances/" + pushInstanceID + "/devices/fcm"
			var n atomic.Int64
			register := func(rec *discardWriter) {
				body := []byte(`{"token":"bench:` + strconv.FormatInt(n.Add(1), 36) + `","metadata":{"sdkVersion":"2.0.0","androidVersion":"14"}}`)
				req := httptest.NewRequest("POST", target, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				rec.status = 0
				engine.ServeHTTP(rec, req)
				if rec.status != http.StatusOK {
					b.Errorf("status %d", rec.status)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			if parallel {
				b.RunParallel(func(pb *testing.PB) {
					rec := &discardWriter{header: http.Header{}}
					for pb.Next() {
						register(rec)
					}
				})
			} else {
				rec := &discardWriter{header: http.Header{}}
				for b.Loop() {
					register(rec)
				}
			}
			b.ReportMetric(float64(n.Load())/b.Elapsed().Seconds(), "registrations/s")
		})
	}
}

// Size of the large data set of BenchmarkMillionDevices.
const (
	millionDevices     = 1_000_000
	popularSubscribers = 100_000
	importBatch        = 20_000
)

// BenchmarkMillionDevices measures interest queries on an instance holding
// 1,000,000 devices, each subscribed to one of 1,000 "bucket-N" interests,
// 100,000 of them also to "popular". The data set is bulk-imported through
// storage (about half a minute), not through HTTP; it only exists under
// -bench and is skipped with -short.
//
//   - ListInterests: GET …/interests of a device holding 150 interests (a
//     full page of 100 and a cursor), through the gin engine.
//   - ListInterestsNextPage: the same with the cursor, the remaining 50.
//   - SubscribersPage: one page of 1,000 devices of "popular" from the
//     middle of its range, the Publish API's resolution step.
//   - AllSubscribers: every subscriber of "popular", page by page.
func BenchmarkMillionDevices(b *testing.B) {
	if testing.Short() {
		b.Skip("builds a 1,000,000-device database")
	}
	ctx := context.Background()
	db := openPushDB(b)
	start := time.Now()
	batch := make([]storage.DeviceImport, 0, importBatch)
	for i := range millionDevices {
		interests := []string{"bucket-" + strconv.Itoa(i%1000)}
		if i%(millionDevices/popularSubscribers) == 0 {
			interests = append(interests, "popular")
		}
		batch = append(batch, storage.DeviceImport{
			Device: storage.Device{ID: storage.NewDeviceID(storage.PlatformFCM), InstanceID: pushInstanceID, Platform: storage.PlatformFCM,
				Token: "bench-token:" + strconv.Itoa(i), Metadata: map[string]string{"sdkVersion": "2.0.0"}},
			Interests: interests,
		})
		if len(batch) == importBatch {
			if err := db.ImportDevices(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if n, err := db.CountInterestSubscribers(ctx, pushInstanceID, "popular"); err != nil || n != popularSubscribers {
		b.Fatalf("popular has %d subscribers (%v)", n, err)
	}
	b.Logf("imported %d devices in %v", millionDevices, time.Since(start).Round(time.Millisecond))

	// The measured device: a popular subscriber with 150 interests.
	d, _, err := db.RegisterDevice(ctx, storage.Device{InstanceID: pushInstanceID, Platform: storage.PlatformFCM, Token: "measured"})
	if err != nil {
		b.Fatal(err)
	}
	interests := []string{"popular"}
	for i := range 149 {
		interests = append(interests, fmt.Sprintf("topic-%03d", i))
	}
	if err := db.SetDeviceInterests(ctx, pushInstanceID, storage.PlatformFCM, d.ID, interests); err != nil {
		b.Fatal(err)
	}
	engine := newPushEngine(b, db, zap.NewNop(), nil)
	list := func(b *testing.B, target string) {
		req := httptest.NewRequest("GET", target, nil)
		rec := &discardWriter{header: http.Header{}}
		b.ReportAllocs()
		for b.Loop() {
			rec.status = 0
			req.Body = io.NopCloser(bytes.NewReader(nil))
			engine.ServeHTTP(rec, req)
			if rec.status != http.StatusOK {
				b.Fatalf("status %d", rec.status)
			}
		}
	}
	base := "/device_api/v1/instances/" + pushInstanceID + "/devices/fcm/" + d.ID + "/interests"
	b.Run("ListInterests", func(b *testing.B) { list(b, base) })
	b.Run("ListInterestsNextPage", func(b *testing.B) { list(b, base+"?cursor="+encodeInterestCursor("topic-098")) })

	// The resolver's reads: a publish to interests has one stream per
	// platform, and these devices are all on FCM.
	subscribers := func(interests ...string) storage.Publish {
		return storage.Publish{ID: "bench", InstanceID: pushInstanceID, TargetKind: storage.TargetInterests, Targets: interests}
	}
	fcm := map[storage.Platform]bool{storage.PlatformFCM: true}
	b.Run("SubscribersPage", func(b *testing.B) {
		mid, _, _, err := db.PublishTargets(ctx, subscribers("popular"), storage.PlatformFCM, fcm, "fcm-8", 1)
		if err != nil || len(mid) != 1 {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			page, _, _, err := db.PublishTargets(ctx, subscribers("popular", "bucket-7"), storage.PlatformFCM, fcm, mid[0].DeviceID, 1000)
			if err != nil || len(page) != 1000 {
				b.Fatalf("%d devices, %v", len(page), err)
			}
		}
	})
	b.Run("AllSubscribers", func(b *testing.B) {
		for b.Loop() {
			total, cursor := 0, ""
			for last := false; !last; {
				var page []storage.Delivery
				var err error
				page, cursor, last, err = db.PublishTargets(ctx, subscribers("popular"), storage.PlatformFCM, fcm, cursor, 1000)
				if err != nil {
					b.Fatal(err)
				}
				total += len(page)
			}
			if total != popularSubscribers+1 {
				b.Fatalf("%d subscribers", total)
			}
		}
	})
}
