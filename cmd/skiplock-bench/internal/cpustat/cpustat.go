// Package cpustat reads CPU time from Linux's /proc: a process's, and the
// whole machine's. Elsewhere it reads zero, and the figures built on it
// are left out.
package cpustat

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ClockTick is USER_HZ, the unit of /proc's CPU times. It is 100 on every
// Linux architecture Go supports.
const ClockTick = 100

// Process returns the user+system CPU time process pid has used; zero
// where /proc is missing or the process is not there.
func Process(pid int) time.Duration {
	_, own, _, _ := Stat(pid)
	return own
}

// Stat reads process pid's parent and its CPU time, its own and that of
// the children it has waited for, from /proc/<pid>/stat; ok is false where
// /proc is missing or the process is not there.
func Stat(pid int) (ppid int, own, children time.Duration, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	// The command name is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0, 0, false
	}
	n := func(k int) time.Duration {
		v, _ := strconv.ParseInt(f[k], 10, 64)
		return time.Duration(v) * time.Second / ClockTick
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, n(11) + n(12), n(13) + n(14), true
}

// Local reports whether process pid is on this machine, where Process
// reads its CPU time.
func Local(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil
}

// Switches returns how many times process pid's threads have been
// switched off their CPU, waiting (voluntary: a sleep, a lock, a socket
// read) or preempted, summed over its living threads from
// /proc/<pid>/task/*/status; zero where /proc is missing.
func Switches(pid int) int64 {
	dirs, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/[0-9]*")
	var n int64
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, key := range []string{"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"} {
				if rest, ok := strings.CutPrefix(line, key); ok {
					v, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
					n += v
				}
			}
		}
	}
	return n
}

// MachineSwitches is how many context switches the whole machine has made
// since boot, from /proc/stat; zero where it is missing.
func MachineSwitches() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "ctxt "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return n
		}
	}
	return 0
}

// MachineBusy is the CPU time the whole machine has spent busy (not idle,
// not waiting for I/O) since boot, summed over its CPUs.
func MachineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / ClockTick
}

// Work measures a work phase's CPU: the machine's, and optionally the
// client's own process and the server processes serving it.
type Work struct {
	machine, client, server time.Duration
	servers                 []int
}

// Start begins measuring; servers are the pids of the server processes
// (PostgreSQL backends) to account as the server's, if they are local.
func Start(servers ...int) *Work {
	w := &Work{servers: servers, machine: MachineBusy(), client: Process(os.Getpid())}
	for _, pid := range servers {
		w.server += Process(pid)
	}
	return w
}

// Report writes, for n tasks, the CPU per task since Start as key=value
// lines a compare run reads: machine_cpu_us_per_task (every process on
// the machine, the server's included, while the work ran), and with
// server pids given, client_cpu_us_per_task and server_cpu_us_per_task.
// It writes nothing where /proc is missing.
func (w *Work) Report(out io.Writer, n int) {
	machine := MachineBusy() - w.machine
	if machine <= 0 || n <= 0 {
		return
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(n) }
	fmt.Fprintf(out, "machine_cpu_us_per_task=%.1f\n", per(machine))
	if len(w.servers) > 0 {
		var server time.Duration
		for _, pid := range w.servers {
			server += Process(pid)
		}
		fmt.Fprintf(out, "client_cpu_us_per_task=%.1f server_cpu_us_per_task=%.1f\n",
			per(Process(os.Getpid())-w.client), per(server-w.server))
	}
}
