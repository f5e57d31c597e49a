// Package testkit is what tests and benchmarks of several packages measure
// and check the same way: the CPU time a process has used, and a VAPID key
// pair.
package testkit

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CPU is the CPU time (user and system) this process has used so far.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcessCPU is the CPU time another process (a Redis, a PostgreSQL
// session, a node started by the test) has used so far: the sum of its
// threads' run time in /proc/<pid>/task/*/schedstat, which the kernel keeps
// to the nanosecond (the user and system times of /proc/<pid>/stat go by
// 10 ms ticks, too coarse for a Redis that spends a few microseconds a
// message). 0 where /proc cannot be read.
func ProcessCPU(pid int) time.Duration {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/schedstat")
	var total time.Duration
	for _, task := range tasks {
		raw, err := os.ReadFile(task)
		if err != nil {
			continue // a thread that ended
		}
		if f := strings.Fields(string(raw)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			total += time.Duration(ns)
		}
	}
	return total
}

// CheckVAPID fails t unless public and private are a VAPID key pair as Web
// Push takes it: base64url without padding of a P-256 public key, 65 bytes
// uncompressed (0x04 first), and of the 32-byte private scalar it belongs
// to.
func CheckVAPID(t testing.TB, public, private string) {
	t.Helper()
	pub, err := base64.RawURLEncoding.DecodeString(public)
	if err != nil || len(pub) != 65 || pub[0] != 4 {
		t.Fatalf("VAPID public key %q: want base64url of 65 bytes starting 0x04 (%v)", public, err)
	}
	if _, err := ecdh.P256().NewPublicKey(pub); err != nil {
		t.Fatalf("VAPID public key is not a P-256 point: %v", err)
	}
	priv, err := base64.RawURLEncoding.DecodeString(private)
	if err != nil || len(priv) != 32 {
		t.Fatalf("VAPID private key: want base64url of 32 bytes (%v)", err)
	}
	key, err := ecdh.P256().NewPrivateKey(priv)
	if err != nil {
		t.Fatalf("VAPID private key is not a P-256 scalar: %v", err)
	}
	if !bytes.Equal(key.PublicKey().Bytes(), pub) {
		t.Fatal("the VAPID public key does not belong to the private key")
	}
}
