package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/skiplock/skiplock/cmd/skiplock-bench/internal/cpustat"
)

// rssBytes is a process's resident set size, from /proc/<pid>/status.
func rssBytes(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// tcpPorts returns the local TCP ports of a process's sockets: for a
// client, the client_port that pg_stat_activity shows for its backends.
func tcpPorts(pid int) []int {
	fds, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/fd/*")
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil {
			if inode, ok := strings.CutPrefix(l, "socket:["); ok {
				inodes[strings.TrimSuffix(inode, "]")] = true
			}
		}
	}
	var ports []int
	for _, table := range []string{"/proc/" + strconv.Itoa(pid) + "/net/tcp", "/proc/" + strconv.Itoa(pid) + "/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil {
				ports = append(ports, int(p))
			}
		}
	}
	return ports
}

// treeCPU is the CPU time of a process and all its descendants, living or
// reaped: its own, what its reaped children used (cutime, cstime), and what
// the living ones have used so far.
func treeCPU(root int) time.Duration {
	parent := map[int]int{}
	own := map[int]time.Duration{}
	reaped := map[int]time.Duration{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if pp, o, c, ok := cpustat.Stat(pid); ok {
			parent[pid], own[pid], reaped[pid] = pp, o, c
		}
	}
	var total time.Duration
	for pid := range own {
		for p := pid; p != 0; p = parent[p] {
			if p == root {
				total += own[pid]
				if pid == root {
					total += reaped[pid]
				}
				break
			}
			if parent[p] == p {
				break
			}
		}
	}
	return total
}

// noiseProbe measures how much CPU processes other than the bench (with its
// worker processes) and the server used during a run: other work on a
// shared machine that skews the numbers.
type noiseProbe struct {
	postmaster int
	start      time.Time
	busy, ours time.Duration
}

func newNoiseProbe(postmaster int) *noiseProbe {
	p := &noiseProbe{postmaster: postmaster, start: time.Now()}
	p.busy, p.ours = cpustat.MachineBusy(), p.oursNow()
	return p
}

func (p *noiseProbe) oursNow() time.Duration {
	d := treeCPU(os.Getpid())
	if p.postmaster > 0 {
		d += treeCPU(p.postmaster)
	}
	return d
}

// share is the fraction of the machine's CPU that other processes used.
func (p *noiseProbe) share() float64 {
	other := (cpustat.MachineBusy() - p.busy) - (p.oursNow() - p.ours)
	return max(other.Seconds(), 0) / (time.Since(p.start).Seconds() * float64(runtime.NumCPU()))
}
