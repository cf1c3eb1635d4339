package gate

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
)

// The gate trusts processes, not only credentials: on the leader any
// process presenting the scheduler's certificate (a second scheduler
// started by hand with the unit's kubeconfig, a static-pod manifest that a
// kubeadm upgrade re-created) would otherwise write with the current
// token. So before a connection's first request is forwarded, the gate
// finds the process at the other end of the loopback socket and requires
// it to run in the gated unit's cgroup:
//
//	socket -> inode   the kernel's socket diagnostics (NETLINK_SOCK_DIAG,
//	                  inet_diag), exact 4-tuple of the client's socket;
//	inode  -> PID     the /proc/PID/fd entry that is socket:[inode];
//	PID    -> cgroup  /proc/PID/cgroup: the unit's cgroup is the one whose
//	                  path has the unit's name as a component (systemd
//	                  names every unit's cgroup after it; a sub-cgroup of a
//	                  Delegate=yes unit is still inside).
//
// The answer is kept for the connection's life: a component keeps a few
// long-lived connections (HTTP/2 multiplexes every request over one), so
// the /proc walk is paid once per connection, not per request.

// Peer is the process at the other end of a gate connection.
type Peer struct {
	PID     int
	Cmdline string
	Cgroup  string // its cgroup path(s) as /proc/PID/cgroup names them
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

// ProcPeers is Peers over the kernel: sock_diag and /proc.
type ProcPeers struct {
	Proc string // "/proc" if empty
	// unitPIDs, if set, lists the unit's processes to look at first
	// (systemd's cgroup.procs): the common case then reads a handful of
	// fd tables instead of every process's.
	UnitPIDs func(unit string) []int
}

// Check implements Peers.
func (p ProcPeers) Check(unit string, client, server net.Addr) (Peer, error) {
	s, err := netlink.SocketGet(client, server)
	if err != nil {
		return Peer{}, fmt.Errorf("socket diagnostics for %s -> %s: %w", client, server, err)
	}
	proc := p.Proc
	if proc == "" {
		proc = "/proc"
	}
	var first []int
	if p.UnitPIDs != nil {
		first = p.UnitPIDs(unit)
	}
	pid, err := socketOwner(proc, uint64(s.INode), first)
	if err != nil {
		return Peer{}, err
	}
	peer := Peer{PID: pid, Cmdline: cmdline(proc, pid)}
	cg, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return peer, fmt.Errorf("cgroup of PID %d: %w", pid, err)
	}
	paths := cgroupPaths(cg)
	peer.Cgroup = strings.Join(paths, ",")
	if !InUnit(paths, unit) {
		return peer, ErrStranger
	}
	return peer, nil
}

// socketOwner finds the process holding socket inode: the candidates in
// first, then every process.
func socketOwner(proc string, inode uint64, first []int) (int, error) {
	target := "socket:[" + strconv.FormatUint(inode, 10) + "]"
	for _, pid := range first {
		if holds(proc, pid, target) {
			return pid, nil
		}
	}
	ents, err := os.ReadDir(proc)
	if err != nil {
		return 0, err
	}
	var denied int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ok, err := holdsErr(proc, pid, target)
		if ok {
			return pid, nil
		}
		if errors.Is(err, os.ErrPermission) {
			denied++
		}
	}
	if denied > 0 {
		return 0, fmt.Errorf("no process holds %s (the fd tables of %d processes were unreadable: the supervisor needs CAP_SYS_PTRACE)", target, denied)
	}
	return 0, fmt.Errorf("no process holds %s (it exited?)", target)
}

func holds(proc string, pid int, target string) bool {
	ok, _ := holdsErr(proc, pid, target)
	return ok
}

func holdsErr(proc string, pid int, target string) (bool, error) {
	dir := filepath.Join(proc, strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == target {
			return true, nil
		}
	}
	return false, nil
}

func cmdline(proc string, pid int) string {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return "?"
	}
	return strings.TrimSpace(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})))
}

// cgroupPaths are the paths /proc/PID/cgroup gives for the unified
// hierarchy ("0::") and systemd's own ("name=systemd", hybrid layouts).
func cgroupPaths(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) == 3 && (parts[0] == "0" && parts[1] == "" || parts[1] == "name=systemd") {
			out = append(out, parts[2])
		}
	}
	return out
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

// SystemdUnitPIDs reads the processes of unit's cgroup where systemd puts
// a system unit (the unified hierarchy, or the hybrid layout's), for
// ProcPeers.UnitPIDs; none if it is elsewhere (the full walk then finds
// them).
func SystemdUnitPIDs(unit string) []int {
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"} {
		b, err := os.ReadFile(filepath.Join(root, "system.slice", unit, "cgroup.procs"))
		if err != nil {
			continue
		}
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
		return pids
	}
	return nil
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
