package node

import (
	"testing"
	"time"
)

// A zero Options is what `herald serve` runs with: the certificate files
// checked every 2 s, the directories every second; a field set is kept.
func TestOptionsDefaults(t *testing.T) {
	if o := (Options{}).WithDefaults(); o.CertPoll != 2*time.Second || o.DirectoryReload != time.Second {
		t.Fatalf("defaults: certificate poll %v, directory reload %v; want 2s and 1s", o.CertPoll, o.DirectoryReload)
	}
	if o := (Options{CertPoll: time.Hour, DirectoryReload: time.Minute}).WithDefaults(); o.CertPoll != time.Hour || o.DirectoryReload != time.Minute {
		t.Fatalf("set: certificate poll %v, directory reload %v; want 1h and 1m", o.CertPoll, o.DirectoryReload)
	}
}
