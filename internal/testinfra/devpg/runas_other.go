//go:build !unix

package devpg

import (
	"io/fs"
	"os/exec"
)

// Outside unix there is no root/initdb conflict to work around.
func lookupRunAs() (*runAs, error) { return nil, nil }

func (r *runAs) apply(*exec.Cmd) {}

func ownerOf(fs.FileInfo) int { return -1 }
