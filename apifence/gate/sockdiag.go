package gate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The kernel's socket diagnostics (NETLINK_SOCK_DIAG, inet_diag) answer,
// for one exactly named TCP socket, its inode and the cgroup (v2) it was
// created in (INET_DIAG_CGROUP_ID, Linux 5.9 and later): the cgroup of
// the process that opened the connection, read without looking into that
// process (no /proc/PID/fd, so no CAP_SYS_PTRACE).

// inetDiagCgroupID is INET_DIAG_CGROUP_ID (linux/inet_diag.h).
const inetDiagCgroupID = 21

// sizeofInetDiagMsg is struct inet_diag_msg: 4 bytes, the 48-byte
// inet_diag_sockid, then expires, rqueue, wqueue, uid and inode.
const sizeofInetDiagMsg = 72

// sockInfo is what the kernel says of one socket.
type sockInfo struct {
	Inode    uint32
	UID      uint32
	CgroupID uint64 // 0 when the kernel did not say (before 5.9)
}

// inetDiagReq is struct inet_diag_req_v2 naming one socket exactly.
type inetDiagReq struct {
	family   uint8
	src, dst *net.TCPAddr
}

func (r *inetDiagReq) Len() int { return 56 }

func (r *inetDiagReq) Serialize() []byte {
	b := make([]byte, r.Len())
	b[0], b[1] = r.family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(b[4:], 0xffffffff) // every state
	binary.BigEndian.PutUint16(b[8:], uint16(r.src.Port))
	binary.BigEndian.PutUint16(b[10:], uint16(r.dst.Port))
	if r.family == unix.AF_INET {
		copy(b[12:], r.src.IP.To4())
		copy(b[28:], r.dst.IP.To4())
	} else {
		copy(b[12:], r.src.IP.To16())
		copy(b[28:], r.dst.IP.To16())
	}
	// interface 0; cookie INET_DIAG_NOCOOKIE: match on the addresses alone.
	binary.NativeEndian.PutUint32(b[48:], ^uint32(0))
	binary.NativeEndian.PutUint32(b[52:], ^uint32(0))
	return b
}

// sockDiag asks the kernel about the TCP socket whose own address is local
// and whose peer is remote (both in this network namespace).
func sockDiag(local, remote net.Addr) (sockInfo, error) {
	l, ok1 := local.(*net.TCPAddr)
	r, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return sockInfo{}, fmt.Errorf("not a TCP connection: %s -> %s", local, remote)
	}
	req := &inetDiagReq{family: unix.AF_INET6, src: l, dst: r}
	if l.IP.To4() != nil && r.IP.To4() != nil {
		req.family = unix.AF_INET
	}
	nr := nl.NewNetlinkRequest(nl.SOCK_DIAG_BY_FAMILY, 0)
	nr.AddData(req)
	msgs, err := nr.Execute(unix.NETLINK_INET_DIAG, nl.SOCK_DIAG_BY_FAMILY)
	if err != nil {
		return sockInfo{}, err
	}
	if len(msgs) != 1 {
		return sockInfo{}, fmt.Errorf("%d answers for one socket", len(msgs))
	}
	return parseInetDiag(msgs[0])
}

func parseInetDiag(m []byte) (sockInfo, error) {
	if len(m) < sizeofInetDiagMsg {
		return sockInfo{}, fmt.Errorf("short inet_diag answer (%d bytes)", len(m))
	}
	s := sockInfo{UID: binary.NativeEndian.Uint32(m[64:]), Inode: binary.NativeEndian.Uint32(m[68:])}
	attrs, err := nl.ParseRouteAttr(m[sizeofInetDiagMsg:])
	if err != nil {
		return s, err
	}
	for _, a := range attrs {
		if a.Attr.Type == inetDiagCgroupID && len(a.Value) >= 8 {
			s.CgroupID = binary.NativeEndian.Uint64(a.Value)
		}
	}
	if s.CgroupID == 0 {
		return s, errors.New("the kernel did not name the socket's cgroup (INET_DIAG_CGROUP_ID needs Linux 5.9 or later with cgroup v2)")
	}
	return s, nil
}
