package devpg

// runAs is the unprivileged account the throwaway cluster runs under when
// we are root; a nil *runAs means "run as ourselves".
type runAs struct {
	name     string
	uid, gid int
}
