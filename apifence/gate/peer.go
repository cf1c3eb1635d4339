package gate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The gate trusts processes, not only credentials: on the leader any
// process presenting the scheduler's certificate (a second scheduler
// started by hand with the unit's kubeconfig, a static-pod manifest that a
// kubeadm upgrade re-created) would otherwise write with the current
// token. So before a connection's first request is forwarded, the gate
// asks the kernel which cgroup the other end of the loopback socket was
// opened in, and requires the gated unit's:
//
//	socket -> cgroup  the kernel's socket diagnostics (NETLINK_SOCK_DIAG,
//	                  inet_diag, exact 4-tuple of the client's socket):
//	                  INET_DIAG_CGROUP_ID, the cgroup v2 ID of the process
//	                  that created the socket (sockdiag.go);
//	ID -> path        the directory of the cgroup2 hierarchy whose inode
//	                  number is that ID; the unit's cgroup is the one whose
//	                  path has the unit's name as a component (systemd
//	                  names every unit's cgroup after it; a sub-cgroup of a
//	                  Delegate=yes unit is still inside).
//
// Nothing of the other process is read for the decision (no /proc/PID/fd,
// which the kernel hides from a supervisor without CAP_SYS_PTRACE when the
// component runs as root). A refused connection's processes are named from
// the cgroup's cgroup.procs and their world-readable command lines.
//
// The answer is kept for the connection's life: a component keeps a few
// long-lived connections (HTTP/2 multiplexes every request over one), so
// the check is paid once per connection, not per request.

// Peer is the process at the other end of a gate connection.
type Peer struct {
	PID     int // 0 when the cgroup holds several processes and the socket's is not known
	Cmdline string
	Cgroup  string // its cgroup path as /proc/PID/cgroup names it
}

func (p Peer) String() string {
	return fmt.Sprintf("PID %d (%s) in cgroup %s", p.PID, p.Cmdline, p.Cgroup)
}

// Peers finds the process behind a connection and says whether it belongs
// to unit. A nil Peers in Config checks nothing (tests of other parts).
type Peers interface {
	Check(unit string, client, server net.Addr) (Peer, error)
}

// ErrStranger is a connection from a process outside the gated unit.
var ErrStranger = errors.New("the connecting process does not run in the gated unit")

// ProcPeers is Peers over the kernel: sock_diag and the cgroup2 hierarchy.
type ProcPeers struct {
	Proc string // "/proc" if empty
	// Cgroups is where the cgroup2 hierarchy is mounted; if empty, read
	// from /proc/self/mountinfo.
	Cgroups string
}

// Check implements Peers.
func (p ProcPeers) Check(unit string, client, server net.Addr) (Peer, error) {
	s, err := sockDiag(client, server)
	if err != nil {
		return Peer{}, fmt.Errorf("socket diagnostics for %s -> %s: %w", client, server, err)
	}
	root := p.Cgroups
	if root == "" {
		if root, err = cgroup2Mount(p.proc()); err != nil {
			return Peer{}, err
		}
	}
	path, err := cgroupByID(root, s.CgroupID, unit)
	if err != nil {
		return Peer{}, err
	}
	peer := Peer{Cgroup: path}
	if InUnit([]string{path}, unit) {
		return peer, nil
	}
	peer.PID, peer.Cmdline = p.name(filepath.Join(root, path), uint64(s.Inode))
	return peer, ErrStranger
}

func (p ProcPeers) proc() string {
	if p.Proc == "" {
		return "/proc"
	}
	return p.Proc
}

// cgroup2Mount is where the unified hierarchy is mounted.
func cgroup2Mount(proc string) (string, error) {
	b, err := os.ReadFile(filepath.Join(proc, "self", "mountinfo"))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if pre, post, ok := strings.Cut(l, " - "); ok && strings.HasPrefix(post, "cgroup2 ") {
			if f := strings.Fields(pre); len(f) > 4 {
				return f[4], nil
			}
		}
	}
	return "", errors.New("no cgroup2 hierarchy mounted (the API gates' process check needs cgroup v2)")
}

// cgroupByID is the path, below root, of the cgroup whose ID is id: the
// unit's own cgroup tree (where systemd puts a system unit) first, then
// the whole hierarchy.
func cgroupByID(root string, id uint64, unit string) (string, error) {
	var found string
	find := func(dir string) bool {
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if st, err := os.Stat(path); err == nil && st.Sys().(*syscall.Stat_t).Ino == id {
				found = path
				return filepath.SkipAll
			}
			return nil
		})
		return found != ""
	}
	if !find(filepath.Join(root, "system.slice", unit)) && !find(root) {
		return "", fmt.Errorf("no cgroup with ID %d below %s (the process's cgroup is gone, or outside this cgroup namespace)", id, root)
	}
	rel, err := filepath.Rel(root, found)
	if err != nil {
		return "", err
	}
	return "/" + strings.TrimPrefix(filepath.ToSlash(rel), "."), nil
}

// name names the process behind a refused socket: the cgroup's process
// holding socket inode when its fd table is readable, else the cgroup's
// only process, else all of them (PID 0).
func (p ProcPeers) name(dir string, inode uint64) (int, string) {
	var pids []int
	if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
	}
	target := "socket:[" + strconv.FormatUint(inode, 10) + "]"
	for _, pid := range pids {
		if holds(p.proc(), pid, target) {
			return pid, cmdline(p.proc(), pid)
		}
	}
	switch len(pids) {
	case 0:
		return 0, "?"
	case 1:
		return pids[0], cmdline(p.proc(), pids[0])
	}
	var parts []string
	for i, pid := range pids {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(pids)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("PID %d: %s", pid, cmdline(p.proc(), pid)))
	}
	return 0, "one of " + strings.Join(parts, "; ")
}

func holds(proc string, pid int, target string) bool {
	dir := filepath.Join(proc, strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == target {
			return true
		}
	}
	return false
}

func cmdline(proc string, pid int) string {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return "?"
	}
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// InUnit reports whether one of the cgroup paths is unit's cgroup or
// below it.
func InUnit(paths []string, unit string) bool {
	for _, p := range paths {
		for _, c := range strings.Split(p, "/") {
			if c == unit {
				return true
			}
		}
	}
	return false
}

// peerKey carries a connection's verdict through its requests' contexts.
type peerKey struct{}

// connPeer is one connection's verdict, computed at its first request.
type connPeer struct {
	conn net.Conn
	once sync.Once
	peer Peer
	err  error
}

func (g *Gate) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, peerKey{}, &connPeer{conn: c})
}

// checkPeer is the connection's verdict; the first request computes it
// and a refusal is logged once per connection.
func (g *Gate) checkPeer(ctx context.Context) (Peer, error) {
	cp, ok := ctx.Value(peerKey{}).(*connPeer)
	if g.cfg.Peers == nil {
		return Peer{}, nil
	}
	if !ok {
		return Peer{}, errors.New("gate: connection without a peer record")
	}
	cp.once.Do(func() {
		cp.peer, cp.err = g.cfg.Peers.Check(g.cfg.Unit, cp.conn.RemoteAddr(), cp.conn.LocalAddr())
		if cp.err != nil {
			g.refused.Add(1)
			g.log.Error("API gate refused a connection from a process outside its unit: it would write with this term's fencing token",
				"unit", g.cfg.Unit, "pid", cp.peer.PID, "cmdline", cp.peer.Cmdline, "cgroup", cp.peer.Cgroup,
				"remote", cp.conn.RemoteAddr().String(), "err", cp.err)
			if g.cfg.OnStranger != nil {
				g.cfg.OnStranger(cp.peer, cp.err)
			}
		}
	})
	return cp.peer, cp.err
}

// Refused counts the connections refused for their process.
func (g *Gate) Refused() int64 { return g.refused.Load() }
