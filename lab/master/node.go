// Package master runs the lab's Kubernetes masters: systemd-nspawn
// containers booting the host's own OS (read-only, volatile overlay) inside
// the lab's network namespaces, with the witness units standing in for
// kube-scheduler and kube-controller-manager, and kha-supervisor installed as
// on a real node.
//
// The containers belong to one long-lived holder process (Hold), because
// systemd-nspawn is started with a parent-death signal: the lab's short CLI
// commands attach to them by the PID of the container's systemd (Attach).
package master

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// env is the environment of commands run inside a container: nothing of the
// caller's environment (NOTIFY_SOCKET, a test's PATH) may leak in.
var env = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"LANG=C.UTF-8",
	"SYSTEMD_PAGER=",
	"SYSTEMD_COLORS=0",
	"TERM=dumb",
}

// Node is a booted master, reached through its systemd's PID.
type Node struct {
	Name   string // lab host name, e.g. m1
	Leader int    // PID of the container's PID 1 as seen from the host
}

// Root is the container's root file system as seen from the host.
func (n *Node) Root() string { return fmt.Sprintf("/proc/%d/root", n.Leader) }

// Alive reports whether the container's systemd still runs.
func (n *Node) Alive() bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d/ns/mnt", n.Leader))
	return err == nil
}

// Command runs argv inside every namespace of the container.
func (n *Node) Command(ctx context.Context, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(n.Leader), "-a", "--"}, argv...)...)
	cmd.Env = env
	return cmd
}

// Exec runs argv inside and returns its standard output; a non-zero exit is
// an error carrying standard error (the output is returned too).
func (n *Node) Exec(ctx context.Context, argv ...string) ([]byte, error) {
	cmd := n.Command(ctx, argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %s: %w: %s", n.Name, strings.Join(argv, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// Run is Exec returning standard output and standard error together, and the
// exit code (-1 when the command could not run at all).
func (n *Node) Run(ctx context.Context, argv ...string) (string, int) {
	cmd := n.Command(ctx, argv...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return string(out), code
}

// WriteFile writes a file inside the container (through its overlay).
func (n *Node) WriteFile(path string, data []byte, perm os.FileMode) error {
	p := filepath.Join(n.Root(), path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	if err := os.WriteFile(p, data, perm); err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	return nil
}

// ReplaceFile writes a file inside the container by renaming a complete
// copy over path, so that a program running from path keeps its old inode
// (writing over a running executable fails with "text file busy").
func (n *Node) ReplaceFile(path string, data []byte, perm os.FileMode) error {
	p := filepath.Join(n.Root(), path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	tmp := p + ".kha-lab-new"
	if err := os.WriteFile(tmp, data, perm); err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	return nil
}

// RemoveFile deletes a file inside the container; a missing one is fine.
func (n *Node) RemoveFile(path string) error {
	if err := os.Remove(filepath.Join(n.Root(), path)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	return nil
}

// Systemctl runs systemctl inside.
func (n *Node) Systemctl(ctx context.Context, args ...string) ([]byte, error) {
	return n.Exec(ctx, append([]string{"systemctl"}, args...)...)
}

// ActiveState is the unit's ActiveState (active, inactive, failed, ...).
func (n *Node) ActiveState(ctx context.Context, unit string) (string, error) {
	out, err := n.Exec(ctx, "systemctl", "show", "-p", "ActiveState", "--value", unit)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// MainPID is the unit's main process as seen inside the container (0 when
// none).
func (n *Node) MainPID(ctx context.Context, unit string) (int, error) {
	out, err := n.Exec(ctx, "systemctl", "show", "-p", "MainPID", "--value", unit)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(out)))
}
