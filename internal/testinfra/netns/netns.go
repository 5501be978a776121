// Package netns makes test hosts for tests of what crosses a network: a
// network namespace of its own, joined to this one by a veth pair, with
// addresses from 198.18.0.0/15 (the benchmarking range) that it assigns
// itself, and a switch that makes the link silent (iptables DROP inside the
// namespace: no FIN, no RST, nothing) and heals it.
//
// It needs root, ip (iproute2) and iptables: New fails saying which is
// missing and how to install it, rather than letting a test skip.
//
//	h, err := netns.New()
//	if err != nil {
//		t.Fatal(err)
//	}
//	defer h.Close()
//	cmd := h.Command(os.Args[0], "-test.run=^$") // runs inside the namespace
//	...
//	h.Blackhole() // the namespace goes silent
//	h.Heal()
package netns

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// Host is a network namespace joined to this one by a veth pair.
type Host struct {
	// Name is the namespace's name (ip netns).
	Name string
	// Local is this side's address, with its /30 network; Remote is the
	// namespace's. Only they two are on the link.
	Local, Remote netip.Prefix

	veth string // this side's end; the other is in the namespace
}

// prefix names every namespace this package makes, with the creating
// process's pid: New sweeps those whose creator is gone.
const prefix = "skiplock-"

// Check reports what the package needs and the machine lacks, as one error
// that says how to install it, or nil.
func Check() error {
	var missing []string
	if os.Geteuid() != 0 {
		return errors.New("netns: network namespaces need root (ip netns add, veth pairs, iptables): run the test as root, as CI does")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("netns: %s not found: install them (Debian/Ubuntu: apt-get install -y iproute2 iptables)", strings.Join(missing, " and "))
	}
	return nil
}

// New makes a namespace, a veth pair between it and this namespace, and a
// free /30 network of 198.18.0.0/15 for the pair.
func New() (*Host, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	sweep()
	local, remote, err := freeNetwork()
	if err != nil {
		return nil, err
	}
	tag := strconv.FormatUint(rand.Uint64()&0xffffff, 36)
	h := &Host{
		Name:   prefix + strconv.Itoa(os.Getpid()) + "-" + tag,
		Local:  local,
		Remote: remote,
		veth:   "slk" + tag + "h", // at most 15 bytes
	}
	peer := "slk" + tag + "n"
	steps := [][]string{
		{"ip", "netns", "add", h.Name},
		{"ip", "link", "add", h.veth, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", h.Name},
		{"ip", "addr", "add", local.String(), "dev", h.veth},
		{"ip", "link", "set", h.veth, "up"},
		{"ip", "-n", h.Name, "addr", "add", remote.String(), "dev", peer},
		{"ip", "-n", h.Name, "link", "set", peer, "up"},
		{"ip", "-n", h.Name, "link", "set", "lo", "up"},
		// Probe iptables in the namespace now, not at the first cut.
		{"ip", "netns", "exec", h.Name, "iptables", "-L", "-n"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

// Command returns a command that runs name inside the namespace; its
// environment is this process's.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// Blackhole makes the namespace silent: every packet in or out is dropped,
// so its peers see neither FIN nor RST, as in a network partition or a
// frozen VM.
func (h *Host) Blackhole() error {
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		if err := run("ip", "netns", "exec", h.Name, "iptables", "-A", chain, "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

// Heal undoes Blackhole.
func (h *Host) Heal() error {
	return run("ip", "netns", "exec", h.Name, "iptables", "-F")
}

// Close deletes the namespace and the veth pair, and with them whatever
// runs in the namespace loses its network.
func (h *Host) Close() error {
	err := run("ip", "netns", "del", h.Name)
	// Deleting the namespace deletes the peer, and with it this end; this
	// only matters when New failed half way.
	_ = exec.Command("ip", "link", "del", h.veth).Run()
	return err
}

func run(args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("netns: %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// freeNetwork picks a /30 of 198.18.0.0/15 that no interface here uses.
func freeNetwork() (local, remote netip.Prefix, err error) {
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return local, remote, fmt.Errorf("netns: ip addr show: %w", err)
	}
	used := string(out)
	for range 100 {
		base := netip.AddrFrom4([4]byte{198, 18 + byte(rand.IntN(2)), byte(rand.IntN(256)), byte(4 * rand.IntN(64))})
		network := netip.PrefixFrom(base, 30)
		taken := false
		for _, f := range strings.Fields(used) {
			if p, err := netip.ParsePrefix(f); err == nil && p.Overlaps(network) {
				taken = true
				break
			}
		}
		if !taken {
			a := base.Next()
			return netip.PrefixFrom(a, 30), netip.PrefixFrom(a.Next(), 30), nil
		}
	}
	return local, remote, errors.New("netns: no free /30 in 198.18.0.0/15")
}

// sweep deletes namespaces this package made in processes that are gone
// (a test killed before its Close).
func sweep() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			_ = exec.Command("ip", "netns", "del", name).Run()
		}
	}
}
