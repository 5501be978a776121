package devpg

import "os/exec"

// Account is the unprivileged account that servers booted for tests run
// as when the tests run as root: initdb, postgres, pg_autoctl and PgBouncer
// all refuse root.
type Account struct {
	Name     string
	UID, GID int
}

// RunAs returns the account to run servers as: nil when the process is not
// root (run as ourselves), else postgres, or nobody when there is no
// postgres user. It fails, saying what to do, when there is neither.
func RunAs() (*Account, error) {
	r, err := lookupRunAs()
	if r == nil || err != nil {
		return nil, err
	}
	return &Account{Name: r.name, UID: r.uid, GID: r.gid}, nil
}

// Apply makes cmd run as the account, keeping cmd's other process
// attributes. A nil Account leaves cmd alone.
func (a *Account) Apply(cmd *exec.Cmd) {
	if a == nil {
		return
	}
	(&runAs{name: a.Name, uid: a.UID, gid: a.GID}).apply(cmd)
}

// Chown hands dir and everything in it to the account. A nil Account does
// nothing.
func (a *Account) Chown(dir string) error {
	if a == nil {
		return nil
	}
	return chownAll(dir, a.UID, a.GID)
}
