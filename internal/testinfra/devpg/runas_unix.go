//go:build unix

package devpg

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// runAsCandidates are tried in order when we are root. "postgres" is
// preferred because packaged installs create it and its files are
// recognisable; "nobody" exists almost everywhere. A variable so tests can
// exercise the fallback on machines that do have a postgres user.
var runAsCandidates = []string{"postgres", "nobody"}

// lookupRunAs picks the account for initdb and postgres, which both refuse
// to run as root.
func lookupRunAs() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range runAsCandidates {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &runAs{name: name, uid: uid, gid: gid}, nil
	}
	return nil, errors.New("devpg: running as root, and initdb refuses to run as root, " +
		"but neither user postgres nor nobody exists: run as a normal user, " +
		"create one (useradd postgres), or set DATABASE_URL")
}

func (r *runAs) apply(cmd *exec.Cmd) {
	if r == nil {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Groups left empty so root's supplementary groups are dropped.
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(r.uid), Gid: uint32(r.gid)}
}

func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
