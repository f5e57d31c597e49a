package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat. It
// is 100 on every Linux architecture Go supports (sysconf would need cgo).
const clockTicks = 100

// rssKiB returns VmRSS of pid ("self" for this process; several pids,
// comma-separated, for their sum) in KiB.
func rssKiB(pid string) (int64, error) { return statusKiB(pid, "VmRSS:") }

// statusKiB returns the field of /proc/<pid>/status named by prefix (such
// as "VmHWM:", the peak RSS) in KiB, summed over pid's comma-separated
// pids.
func statusKiB(pids, prefix string) (int64, error) {
	var sum int64
	for _, pid := range strings.Split(pids, ",") {
		v, err := statusKiBOf(pid, prefix)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

func statusKiBOf(pid, prefix string) (int64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64) // the unit is kB (KiB)
		}
	}
	return 0, errors.New("no " + prefix + " in /proc/" + pid + "/status")
}

// cpuSeconds returns the user+system CPU time of pid ("self" for this
// process; several pids, comma-separated, for their sum), all threads,
// from /proc/<pid>/stat.
func cpuSeconds(pids string) (float64, error) {
	var sum float64
	for _, pid := range strings.Split(pids, ",") {
		v, err := cpuSecondsOf(pid)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

func cpuSecondsOf(pid string) (float64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc/" + pid + "/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, errors.New("short /proc/" + pid + "/stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(ut+st) / clockTicks, nil
}

// cpuMeter measures the CPU share of a process ("system": of the whole
// machine) over an interval, in percent of one core (200 = two cores busy).
type cpuMeter struct {
	pid   string
	start float64
	ok    bool
	at    int64 // unix nanoseconds
}

func startCPU(pid string, now int64) cpuMeter {
	s, err := cpuSeconds(pid)
	if pid == "system" {
		s, err = systemBusySeconds()
	}
	return cpuMeter{pid: pid, start: s, ok: err == nil && pid != "", at: now}
}

func (m cpuMeter) pct(now int64) float64 {
	if !m.ok || now <= m.at {
		return -1
	}
	s, err := cpuSeconds(m.pid)
	if m.pid == "system" {
		s, err = systemBusySeconds()
	}
	if err != nil {
		return -1
	}
	return 100 * (s - m.start) / (float64(now-m.at) / 1e9)
}

// raiseNoFile lifts this process's RLIMIT_NOFILE soft limit to the hard limit
// and returns the resulting soft limit.
func raiseNoFile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, err
		}
	}
	return lim.Cur, nil
}

// listenerPID finds the process listening on TCP port (IPv4 or IPv6) through
// /proc/net/tcp* and the socket links under /proc/<pid>/fd. It needs the
// permission to read other processes' fd directories (same user or root).
func listenerPID(port int) (int, error) {
	inodes := map[string]bool{}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			// sl local_address rem_address st ... inode (field 9)
			if len(fl) < 10 || fl[3] != "0A" { // 0A = LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fl[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil && int(p) == port {
				inodes["socket:["+fl[9]+"]"] = true
			}
		}
		f.Close()
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("no listener on port %d in /proc/net/tcp", port)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	self := os.Getpid()
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == self {
			continue
		}
		fds, err := os.ReadDir(p + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if link, err := os.Readlink(p + "/fd/" + fd.Name()); err == nil && inodes[link] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no readable process owns the listener on port %d (pass -server-pid)", port)
}

// systemBusySeconds returns the CPU time all CPUs spent busy (everything but
// idle and iowait) since boot, from /proc/stat.
func systemBusySeconds() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, errors.New("malformed /proc/stat")
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		// user nice system idle iowait irq softirq steal guest guest_nice;
		// guest time is already counted in user and nice.
		if i != 3 && i != 4 && i < 8 {
			busy += n
		}
	}
	return float64(busy) / clockTicks, nil
}
