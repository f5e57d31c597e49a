package storage

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/heraldrt/herald/storage/testdb"
)

// openDeviceDB opens a test database holding the instance testInstance(instanceID).
func openDeviceDB(t *testing.T) *DB {
	t.Helper()
	db := testdb.New(t, Open)
	if _, err := db.CreateInstance(t.Context(), testInstance(instanceID)); err != nil {
		t.Fatal(err)
	}
	return db
}

func registerTestDevice(t *testing.T, db *DB, p Platform, token string) Device {
	t.Helper()
	d, _, err := db.RegisterDevice(t.Context(), Device{InstanceID: instanceID, Platform: p, Token: token, BundleIdentifier: "com.example"})
	if err != nil {
		t.Fatalf("RegisterDevice: %v", err)
	}
	return d
}

func TestRegisterDevice(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		db := openDeviceDB(t)
		d, interests, err := db.RegisterDevice(t.Context(), Device{InstanceID: instanceID, Platform: PlatformAPNs, Token: "t1",
			BundleIdentifier: "com.example", Metadata: map[string]string{"sdkVersion": "1.0"}})
		checkErr(t, "RegisterDevice", err, nil)
		check(t, "interests", interests, []string{})
		got, err := db.GetDevice(t.Context(), instanceID, PlatformAPNs, d.ID)
		checkErr(t, "GetDevice", err, nil)
		check(t, "device", got, d)
	})
	t.Run("OKKnownTokenUpdatesTheDevice", func(t *testing.T) {
		db := openDeviceDB(t)
		first := registerTestDevice(t, db, PlatformFCM, "tok")
		checkErr(t, "AddDeviceInterest", db.AddDeviceInterest(t.Context(), instanceID, PlatformFCM, first.ID, "news"), nil)
		again, interests, err := db.RegisterDevice(t.Context(), Device{InstanceID: instanceID, Platform: PlatformFCM, Token: "tok",
			Metadata: map[string]string{"androidVersion": "14"}})
		checkErr(t, "RegisterDevice again", err, nil)
		check(t, "id", again.ID, first.ID)
		check(t, "interests", interests, []string{"news"})
		check(t, "metadata", again.Metadata, map[string]string{"androidVersion": "14"})
		check(t, "bundle", again.BundleIdentifier, "")
	})
	t.Run("OKSameTokenOtherPlatform", func(t *testing.T) {
		db := openDeviceDB(t)
		a := registerTestDevice(t, db, PlatformFCM, "tok")
		b := registerTestDevice(t, db, PlatformAPNs, "tok")
		if a.ID == b.ID {
			t.Fatal("devices of two platforms share an id")
		}
	})
	t.Run("ErrUnknownInstance", func(t *testing.T) {
		db := openDeviceDB(t)
		_, _, err := db.RegisterDevice(t.Context(), Device{InstanceID: "other", Platform: PlatformFCM, Token: "x"})
		if err == nil {
			t.Fatal("registered a device on an instance that does not exist")
		}
	})
}

func TestDeviceLifecycle(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	d := registerTestDevice(t, db, PlatformFCM, "tok")

	_, err := db.GetDevice(ctx, instanceID, PlatformAPNs, d.ID)
	checkErr(t, "GetDevice other platform", err, ErrNotFound)
	_, err = db.GetDevice(ctx, "other", PlatformFCM, d.ID)
	checkErr(t, "GetDevice other instance", err, ErrNotFound)

	checkErr(t, "UpdateDeviceMetadata", db.UpdateDeviceMetadata(ctx, instanceID, PlatformFCM, d.ID, map[string]string{"sdkVersion": "2"}), nil)
	checkErr(t, "UpdateDeviceMetadata missing", db.UpdateDeviceMetadata(ctx, instanceID, PlatformFCM, "nope", nil), ErrNotFound)

	// A new token held by another device moves here; that device goes.
	other := registerTestDevice(t, db, PlatformFCM, "tok2")
	checkErr(t, "UpdateDeviceToken", db.UpdateDeviceToken(ctx, instanceID, PlatformFCM, d.ID, "tok2"), nil)
	_, err = db.GetDevice(ctx, instanceID, PlatformFCM, other.ID)
	checkErr(t, "stale device", err, ErrNotFound)
	got, err := db.GetDevice(ctx, instanceID, PlatformFCM, d.ID)
	checkErr(t, "GetDevice", err, nil)
	check(t, "token", got.Token, "tok2")
	check(t, "metadata", got.Metadata, map[string]string{"sdkVersion": "2"})
	checkErr(t, "UpdateDeviceToken missing", db.UpdateDeviceToken(ctx, instanceID, PlatformFCM, "nope", "x"), ErrNotFound)

	checkErr(t, "AddDeviceInterest", db.AddDeviceInterest(ctx, instanceID, PlatformFCM, d.ID, "a"), nil)
	checkErr(t, "DeleteDevice", db.DeleteDevice(ctx, instanceID, PlatformFCM, d.ID), nil)
	checkErr(t, "DeleteDevice again", db.DeleteDevice(ctx, instanceID, PlatformFCM, d.ID), ErrNotFound)
	n, err := db.CountInterestSubscribers(ctx, instanceID, "a")
	checkErr(t, "CountInterestSubscribers", err, nil)
	check(t, "subscribers after delete", n, 0)
}

func TestSetDeviceUser(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	d := registerTestDevice(t, db, PlatformAPNs, "tok")
	t.Run("OK", func(t *testing.T) {
		checkErr(t, "SetDeviceUser", db.SetDeviceUser(ctx, instanceID, PlatformAPNs, d.ID, "alice"), nil)
		checkErr(t, "SetDeviceUser same", db.SetDeviceUser(ctx, instanceID, PlatformAPNs, d.ID, "alice"), nil)
		got, _ := db.GetDevice(ctx, instanceID, PlatformAPNs, d.ID)
		check(t, "user", got.UserID, "alice")
	})
	t.Run("ErrUserAlreadySet", func(t *testing.T) {
		checkErr(t, "SetDeviceUser", db.SetDeviceUser(ctx, instanceID, PlatformAPNs, d.ID, "bob"), ErrUserAlreadySet)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		checkErr(t, "SetDeviceUser", db.SetDeviceUser(ctx, instanceID, PlatformFCM, d.ID, "alice"), ErrNotFound)
	})
	t.Run("ErrUserDeviceLimit", func(t *testing.T) {
		for i := range MaxUserDevices {
			dev := registerTestDevice(t, db, PlatformFCM, "limit-"+strconv.Itoa(i))
			checkErr(t, "SetDeviceUser", db.SetDeviceUser(ctx, instanceID, PlatformFCM, dev.ID, "carol"), nil)
		}
		dev := registerTestDevice(t, db, PlatformFCM, "one-too-many")
		checkErr(t, "SetDeviceUser 101st", db.SetDeviceUser(ctx, instanceID, PlatformFCM, dev.ID, "carol"), ErrUserDeviceLimit)
		devices, err := db.UserDevices(ctx, instanceID, []string{"carol", "alice", "carol"})
		checkErr(t, "UserDevices", err, nil)
		check(t, "user devices", len(devices), MaxUserDevices+1)
		n, err := db.DeleteUser(ctx, instanceID, "carol")
		checkErr(t, "DeleteUser", err, nil)
		check(t, "deleted", n, MaxUserDevices)
	})
}

func TestDeviceInterests(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	d := registerTestDevice(t, db, PlatformWeb, "tok")

	t.Run("OKPaging", func(t *testing.T) {
		var want []string
		for i := range 250 {
			want = append(want, fmt.Sprintf("i%03d", i))
		}
		checkErr(t, "SetDeviceInterests", db.SetDeviceInterests(ctx, instanceID, PlatformWeb, d.ID, append(want, want[:10]...)), nil)
		var got []string
		after, pages := "", 0
		for {
			page, more, err := db.DeviceInterests(ctx, instanceID, PlatformWeb, d.ID, after, 100)
			checkErr(t, "DeviceInterests", err, nil)
			got = append(got, page...)
			pages++
			if !more {
				break
			}
			after = page[len(page)-1]
		}
		check(t, "interests", got, want)
		check(t, "pages", pages, 3)
	})
	t.Run("OKReplace", func(t *testing.T) {
		checkErr(t, "SetDeviceInterests", db.SetDeviceInterests(ctx, instanceID, PlatformWeb, d.ID, []string{"i001", "new"}), nil)
		got, more, err := db.DeviceInterests(ctx, instanceID, PlatformWeb, d.ID, "", 100)
		checkErr(t, "DeviceInterests", err, nil)
		check(t, "interests", got, []string{"i001", "new"})
		check(t, "more", more, false)
		got, more, err = db.DeviceInterests(ctx, instanceID, PlatformWeb, d.ID, "", 2)
		checkErr(t, "DeviceInterests", err, nil)
		check(t, "a page of exactly every interest", got, []string{"i001", "new"})
		check(t, "more after exactly every interest", more, false)
		checkErr(t, "RemoveDeviceInterest", db.RemoveDeviceInterest(ctx, instanceID, PlatformWeb, d.ID, "new"), nil)
		checkErr(t, "RemoveDeviceInterest again", db.RemoveDeviceInterest(ctx, instanceID, PlatformWeb, d.ID, "new"), nil)
		checkErr(t, "AddDeviceInterest twice", db.AddDeviceInterest(ctx, instanceID, PlatformWeb, d.ID, "i001"), nil)
		got, _, _ = db.DeviceInterests(ctx, instanceID, PlatformWeb, d.ID, "", 100)
		check(t, "interests", got, []string{"i001"})
	})
	t.Run("ErrInterestLimit", func(t *testing.T) {
		full := make([]string, MaxDeviceInterests)
		for i := range full {
			full[i] = "x" + strconv.Itoa(i)
		}
		checkErr(t, "SetDeviceInterests 5001", db.SetDeviceInterests(ctx, instanceID, PlatformWeb, d.ID, append(slices.Clone(full), "more")), ErrInterestLimit)
		checkErr(t, "SetDeviceInterests 5000", db.SetDeviceInterests(ctx, instanceID, PlatformWeb, d.ID, full), nil)
		checkErr(t, "AddDeviceInterest 5001st", db.AddDeviceInterest(ctx, instanceID, PlatformWeb, d.ID, "more"), ErrInterestLimit)
		checkErr(t, "AddDeviceInterest held", db.AddDeviceInterest(ctx, instanceID, PlatformWeb, d.ID, "x1"), nil)
		// The last interest in order goes too, though a full set is read
		// to find what changed; and the 5,000th may then be added back.
		sorted := slices.Sorted(slices.Values(full))
		checkErr(t, "SetDeviceInterests 4999", db.SetDeviceInterests(ctx, instanceID, PlatformWeb, d.ID, sorted[:MaxDeviceInterests-1]), nil)
		got, _, err := db.DeviceInterests(ctx, instanceID, PlatformWeb, d.ID, "", MaxDeviceInterests)
		checkErr(t, "DeviceInterests", err, nil)
		check(t, "interests after dropping the last, and whether it is among them",
			[]any{len(got), slices.Contains(got, sorted[MaxDeviceInterests-1])}, []any{MaxDeviceInterests - 1, false})
		checkErr(t, "AddDeviceInterest 5000th", db.AddDeviceInterest(ctx, instanceID, PlatformWeb, d.ID, sorted[MaxDeviceInterests-1]), nil)
	})
	t.Run("ErrNotFound", func(t *testing.T) {
		_, _, err := db.DeviceInterests(ctx, instanceID, PlatformFCM, d.ID, "", 10)
		checkErr(t, "DeviceInterests", err, ErrNotFound)
		checkErr(t, "SetDeviceInterests", db.SetDeviceInterests(ctx, instanceID, PlatformWeb, "nope", nil), ErrNotFound)
		checkErr(t, "AddDeviceInterest", db.AddDeviceInterest(ctx, instanceID, PlatformWeb, "nope", "a"), ErrNotFound)
		checkErr(t, "RemoveDeviceInterest", db.RemoveDeviceInterest(ctx, instanceID, PlatformWeb, "nope", "a"), ErrNotFound)
	})
}

func TestConcurrentUserLimit(t *testing.T) {
	// Many devices racing to join a user at the limit: exactly the limit win.
	db := openDeviceDB(t)
	ctx := t.Context()
	var ids []string
	for i := range MaxUserDevices + 20 {
		ids = append(ids, registerTestDevice(t, db, PlatformFCM, "race-"+strconv.Itoa(i)).ID)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for _, id := range ids {
		wg.Go(func() {
			if db.SetDeviceUser(ctx, instanceID, PlatformFCM, id, "dave") == nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	check(t, "devices bound", won, MaxUserDevices)
}

// Device writes run side by side on PostgreSQL (no write lock; see
// writeRows) and hold as they do one at a time: sixteen clients
// registering the same 50 tokens at once make one device per token, every
// registration answered; binding 120 devices to one user at once binds
// MaxUserDevices of them and refuses the rest; and interests added to one
// device at once all land, none twice.
func TestConcurrentDeviceWrites(t *testing.T) {
	db := openDeviceDB(t)
	ctx := t.Context()
	const clients, tokens = 16, 50
	ids := make([][]string, clients)
	var wg sync.WaitGroup
	errs := make(chan error, clients*tokens+200)
	for c := range clients {
		wg.Go(func() {
			for i := range tokens {
				d, _, err := db.RegisterDevice(ctx, Device{InstanceID: instanceID, Platform: PlatformFCM,
					Token: fmt.Sprintf("tok-%d", (i+c)%tokens), BundleIdentifier: "com.example"})
				if err != nil {
					errs <- err
					continue
				}
				ids[c] = append(ids[c], d.ID)
			}
		})
	}
	wg.Wait()
	distinct := map[string]bool{}
	for _, list := range ids {
		for _, id := range list {
			distinct[id] = true
		}
	}
	var n int
	checkErr(t, "count", db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM devices`).Scan(&n), nil)
	check(t, "devices stored, ids answered", []int{n, len(distinct), len(errs)}, []int{tokens, tokens, 0})

	var bound sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for i := range MaxUserDevices + 20 {
		d := registerTestDevice(t, db, PlatformAPNs, "user-tok-"+strconv.Itoa(i))
		bound.Go(func() {
			err := db.SetDeviceUser(ctx, instanceID, PlatformAPNs, d.ID, "alice")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				outcomes["bound"]++
			case errors.Is(err, ErrUserDeviceLimit):
				outcomes["refused"]++
			default:
				errs <- err
			}
		})
	}
	bound.Wait()
	check(t, "bindings", outcomes, map[string]int{"bound": MaxUserDevices, "refused": 20})

	dev := registerTestDevice(t, db, PlatformWeb, "web-tok")
	var adds sync.WaitGroup
	for i := range 40 {
		adds.Go(func() {
			if err := db.AddDeviceInterest(ctx, instanceID, PlatformWeb, dev.ID, "interest-"+strconv.Itoa(i%20)); err != nil {
				errs <- err
			}
		})
	}
	adds.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a concurrent write failed: %v", err)
	}
	interests, _, err := db.DeviceInterests(ctx, instanceID, PlatformWeb, dev.ID, "", 100)
	checkErr(t, "DeviceInterests", err, nil)
	check(t, "interests added at once", len(interests), 20)
}
