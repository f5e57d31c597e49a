package directory

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/heraldrt/herald/server/internal/wait"
	"github.com/heraldrt/herald/storage"
	"github.com/heraldrt/herald/storage/testdb"
)

const instanceID = "6f1c0a8e-3b2d-4c5e-9f7a-1b2c3d4e5f60"

func TestInstancesFollowTheDatabase(t *testing.T) {
	ctx := context.Background()
	dsn := testdb.DSN(t)
	db := testdb.Open(t, storage.Open, dsn)
	if _, err := db.CreateInstance(ctx, storage.Instance{ID: instanceID, SecretKey: "one", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	d, err := NewInstances(ctx, db, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if in := d.ByID(instanceID); in == nil || in.SecretKey != "one" {
		t.Fatalf("ByID after New: %+v", in)
	}
	if d.ByID("other") != nil {
		t.Fatal("ByID found an instance that does not exist")
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(runCtx, 10*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	// A change made through another connection, as `herald instances` does.
	other := testdb.Open(t, storage.Open, dsn)
	if err := other.UpdateInstance(ctx, storage.Instance{ID: instanceID, SecretKey: "two", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the new secret", func() bool { in := d.ByID(instanceID); return in != nil && in.SecretKey == "two" })
	if err := other.DeleteInstance(ctx, instanceID); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "the instance to go", func() bool { return d.ByID(instanceID) == nil })
}
