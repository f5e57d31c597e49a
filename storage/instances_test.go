package storage

import (
	"testing"
	"time"

	"github.com/heraldrt/herald/storage/testdb"
)

// testInstance returns an instance with every field set to a non-zero value.
func testInstance(id string) Instance {
	return Instance{
		ID:        id,
		SecretKey: "secret-" + id,
		JWTIssuer: "https://auth.example.com",
		Enabled:   true,
		APNs: APNsConfig{
			KeyPEM: "-----BEGIN PRIVATE KEY-----\nMIGT\n-----END PRIVATE KEY-----\n",
			KeyID:  "ABC123DEFG",
			TeamID: "DEF123GHIJ",
			Topic:  "com.example.app",
			URL:    "https://127.0.0.1:8443",
			CAPEM:  "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
		},
		FCM: FCMConfig{
			ServiceAccountJSON: `{"type":"service_account","project_id":"p"}`,
			URL:                "http://127.0.0.1:9000",
		},
		VAPID: VAPIDConfig{
			PublicKey:  "BPub_key-base64url",
			PrivateKey: "priv_key-base64url",
			Subject:    "mailto:ops@example.com",
		},
		PublishQuota: 1000,
	}
}

const instanceID = "9d3d7c4e-54c4-4a38-9a3e-8a1e0f1b2c3d"

func TestCreateInstance(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		db := testdb.New(t, Open)
		before := time.Now().Add(-time.Millisecond)
		in := testInstance(instanceID)
		got, err := db.CreateInstance(t.Context(), in)
		checkErr(t, "CreateInstance", err, nil)

		if got.CreatedAt.Before(before) || got.CreatedAt.After(time.Now()) {
			t.Fatalf("CreatedAt: got %v, want about now", got.CreatedAt)
		}
		check(t, "UpdatedAt", got.UpdatedAt, got.CreatedAt)
		want := in
		want.CreatedAt, want.UpdatedAt = got.CreatedAt, got.UpdatedAt
		check(t, "created instance", got, want)

		stored, err := db.GetInstance(t.Context(), instanceID)
		checkErr(t, "GetInstance", err, nil)
		check(t, "stored instance", stored, got)
	})

	t.Run("ErrConflictDuplicateID", func(t *testing.T) {
		db := testdb.New(t, Open)
		_, err := db.CreateInstance(t.Context(), testInstance(instanceID))
		checkErr(t, "first CreateInstance", err, nil)
		_, err = db.CreateInstance(t.Context(), testInstance(instanceID))
		checkErr(t, "second CreateInstance", err, ErrConflict)
	})
}

func TestGetInstance(t *testing.T) {
	db := testdb.New(t, Open)
	want, err := db.CreateInstance(t.Context(), testInstance(instanceID))
	checkErr(t, "CreateInstance", err, nil)

	t.Run("OK", func(t *testing.T) {
		got, err := db.GetInstance(t.Context(), instanceID)
		checkErr(t, "GetInstance", err, nil)
		check(t, "instance", got, want)
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		_, err := db.GetInstance(t.Context(), "00000000-0000-0000-0000-000000000000")
		checkErr(t, "GetInstance", err, ErrNotFound)
	})
}

func TestListInstances(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		db := testdb.New(t, Open)
		b, err := db.CreateInstance(t.Context(), testInstance("b"))
		checkErr(t, "CreateInstance b", err, nil)
		a, err := db.CreateInstance(t.Context(), testInstance("a"))
		checkErr(t, "CreateInstance a", err, nil)

		got, err := db.ListInstances(t.Context())
		checkErr(t, "ListInstances", err, nil)
		check(t, "instances", got, []Instance{a, b})
	})

	t.Run("Empty", func(t *testing.T) {
		db := testdb.New(t, Open)
		got, err := db.ListInstances(t.Context())
		checkErr(t, "ListInstances", err, nil)
		check(t, "instances", len(got), 0)
	})
}

func TestUpdateInstance(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		db := testdb.New(t, Open)
		created, err := db.CreateInstance(t.Context(), testInstance(instanceID))
		checkErr(t, "CreateInstance", err, nil)

		update := Instance{
			ID:        instanceID,
			SecretKey: "secret-new",
			Enabled:   false,
			APNs:      APNsConfig{KeyID: "NEWKEY"},
			VAPID:     VAPIDConfig{PublicKey: "new-public", PrivateKey: "new-private"},
			CreatedAt: time.Unix(1, 0), // ignored
		}
		checkErr(t, "UpdateInstance", db.UpdateInstance(t.Context(), update), nil)

		got, err := db.GetInstance(t.Context(), instanceID)
		checkErr(t, "GetInstance", err, nil)
		check(t, "CreatedAt", got.CreatedAt, created.CreatedAt)
		if got.UpdatedAt.Before(created.UpdatedAt) {
			t.Fatalf("UpdatedAt: got %v, before CreatedAt %v", got.UpdatedAt, created.UpdatedAt)
		}
		want := update
		want.CreatedAt, want.UpdatedAt = got.CreatedAt, got.UpdatedAt
		check(t, "updated instance", got, want)
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		db := testdb.New(t, Open)
		checkErr(t, "UpdateInstance", db.UpdateInstance(t.Context(), testInstance(instanceID)), ErrNotFound)
	})
}

func TestDeleteInstance(t *testing.T) {
	t.Run("OK", func(t *testing.T) {
		db := testdb.New(t, Open)
		_, err := db.CreateInstance(t.Context(), testInstance("a"))
		checkErr(t, "CreateInstance a", err, nil)
		b, err := db.CreateInstance(t.Context(), testInstance("b"))
		checkErr(t, "CreateInstance b", err, nil)

		checkErr(t, "DeleteInstance", db.DeleteInstance(t.Context(), "a"), nil)

		_, err = db.GetInstance(t.Context(), "a")
		checkErr(t, "GetInstance deleted", err, ErrNotFound)
		got, err := db.ListInstances(t.Context())
		checkErr(t, "ListInstances", err, nil)
		check(t, "remaining instances", got, []Instance{b})
	})

	t.Run("ErrNotFound", func(t *testing.T) {
		db := testdb.New(t, Open)
		checkErr(t, "DeleteInstance", db.DeleteInstance(t.Context(), instanceID), ErrNotFound)
	})
}

func TestCountInstances(t *testing.T) {
	db := testdb.New(t, Open)
	for i, id := range []string{"a", "b", "c"} {
		n, err := db.CountInstances(t.Context())
		checkErr(t, "CountInstances", err, nil)
		check(t, "instances", n, i)
		_, err = db.CreateInstance(t.Context(), testInstance(id))
		checkErr(t, "CreateInstance", err, nil)
	}
	n, err := db.CountInstances(t.Context())
	checkErr(t, "CountInstances", err, nil)
	check(t, "instances", n, 3)
}
