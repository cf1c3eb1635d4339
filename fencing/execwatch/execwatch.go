// Package execwatch learns of every exec on this node's filesystems from the
// kernel (fanotify, FAN_OPEN_EXEC on filesystem marks) and hands on those of
// a managed component's executable, as they happen: the supervisor stops a
// copy started outside its unit within milliseconds of its exec instead of at
// the next /proc poll (issue 19). docs/architecture.md says why fanotify and
// not the process-events connector, and why notification, not permission.
//
// What it sees: every execve(2) (and the dynamic loader's open) of a file on
// a marked filesystem, whatever path, mount, service manager or container
// runtime started it, as long as the process is in the watcher's PID
// namespace (others are reported without a PID and skipped). A file matches
// when it is one of the watched files (device and inode: a hard link, a bind
// mount or /proc/PID/root path of the same file) or when its base name is a
// watched name (a copy under another path). What it does not see: execs on a
// filesystem mounted after the last Mark (Mark is called again every
// minute), on pseudo or noexec filesystems, a renamed copy of the binary, or
// anything while the watcher is not running; the /proc scan is the backstop
// for all of those.
package execwatch

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FileID is a file's identity: the device and inode stat(2) reports.
type FileID struct{ Dev, Ino uint64 }

// Identify stats p (following symlinks).
func Identify(p string) (FileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return FileID{}, err
	}
	return FileID{Dev: st.Dev, Ino: st.Ino}, nil
}

// Match says which execs to hand on: a file is watched when its identity
// is one of Files or its base name one of Names.
type Match struct {
	Names map[string]bool
	Files map[FileID]bool
}

func (m Match) has(p string, id FileID) bool {
	return m.Files[id] || m.Names[path.Base(p)]
}

// Exec is one exec of a watched file by a process in the watcher's PID
// namespace. The event comes from inside execve, so the process may still
// show its previous program in /proc/PID/exe and cmdline: Path is what it
// is becoming. Close it once handled.
type Exec struct {
	PID  int
	Path string    // the file as the kernel opened it, in the watcher's mount namespace
	File FileID    //
	Seen time.Time // when the watcher read the event
	// pidfd refers to the process itself (FAN_REPORT_PIDFD): a signal sent
	// through it never reaches a later process that reused the PID. -1
	// where the kernel gave none (before 5.15).
	pidfd int
}

// Kill sends SIGKILL to the process, through its pidfd when there is one.
// A process already gone is not an error.
func (e *Exec) Kill() error {
	var err error
	if e.pidfd >= 0 {
		err = unix.PidfdSendSignal(e.pidfd, unix.SIGKILL, nil, 0)
	} else {
		err = unix.Kill(e.PID, unix.SIGKILL)
	}
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("execwatch: kill %d: %w", e.PID, err)
	}
	return nil
}

// Close releases the pidfd.
func (e *Exec) Close() {
	if e.pidfd >= 0 {
		_ = unix.Close(e.pidfd)
		e.pidfd = -1
	}
}

// Watcher is one fanotify group with FAN_OPEN_EXEC marks on filesystems.
type Watcher struct {
	f      *os.File
	pidfds bool // the kernel reports pidfds

	mu     sync.Mutex
	match  Match
	marked map[uint64]bool // st_dev of every filesystem marked
}

// Open creates the fanotify group. It needs CAP_SYS_ADMIN (in the initial
// user namespace), a kernel with CONFIG_FANOTIFY and FAN_OPEN_EXEC (5.0),
// and fanotify_init/fanotify_mark allowed by any seccomp filter; the error
// says which failed.
func Open() (*Watcher, error) {
	const base = unix.FAN_CLASS_NOTIF | unix.FAN_CLOEXEC | unix.FAN_NONBLOCK
	const fl = unix.O_RDONLY | unix.O_LARGEFILE | unix.O_CLOEXEC
	pidfds := true
	fd, err := unix.FanotifyInit(base|unix.FAN_REPORT_PIDFD, fl)
	if errors.Is(err, unix.EINVAL) { // before 5.15: no pidfds
		pidfds = false
		fd, err = unix.FanotifyInit(base, fl)
	}
	if err != nil {
		return nil, fmt.Errorf("execwatch: fanotify_init: %w%s", err, hint(err))
	}
	return &Watcher{f: os.NewFile(uintptr(fd), "fanotify"), pidfds: pidfds, marked: map[uint64]bool{}}, nil
}

func hint(err error) string {
	switch {
	case errors.Is(err, unix.EPERM):
		return " (needs CAP_SYS_ADMIN, and fanotify_init allowed by the unit's SystemCallFilter=)"
	case errors.Is(err, unix.ENOSYS):
		return " (kernel built without CONFIG_FANOTIFY)"
	case errors.Is(err, unix.EINVAL):
		return " (kernel too old for FAN_OPEN_EXEC: 5.0 or later)"
	}
	return ""
}

// Close ends the group; a Run in progress returns.
func (w *Watcher) Close() error { return w.f.Close() }

// PIDFDs reports whether the kernel hands out pidfds with each event.
func (w *Watcher) PIDFDs() bool { return w.pidfds }

// SetMatch replaces what is handed on.
func (w *Watcher) SetMatch(m Match) {
	w.mu.Lock()
	w.match = m
	w.mu.Unlock()
}

func (w *Watcher) current() Match {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.match
}

// pseudoFS are filesystem types nothing is executed from (or that fanotify
// cannot mark): never marked.
var pseudoFS = map[string]bool{
	"proc": true, "sysfs": true, "cgroup": true, "cgroup2": true, "devpts": true, "mqueue": true,
	"debugfs": true, "tracefs": true, "securityfs": true, "pstore": true, "bpf": true, "configfs": true,
	"fusectl": true, "hugetlbfs": true, "binfmt_misc": true, "autofs": true, "efivarfs": true,
	"nsfs": true, "selinuxfs": true, "rpc_pipefs": true, "nfsd": true, "devtmpfs": true,
}

// Mark adds FAN_OPEN_EXEC marks on the filesystems holding required (the
// watched executables: an error if one cannot be marked) and on every
// other filesystem mounted in this mount namespace where something could
// be executed (a copy in /tmp, /root, a container's root), best effort.
// Filesystem marks cover every mount of the filesystem, in every mount
// namespace. Calling it again marks what was mounted since; it returns how
// many filesystems are marked in all.
func (w *Watcher) Mark(required []string) (int, error) {
	var errs []error
	for _, p := range required {
		if err := w.markFS(p); err != nil {
			errs = append(errs, err)
		}
	}
	mounts, err := execMounts("/proc/self/mountinfo")
	if err != nil {
		errs = append(errs, err)
	}
	for _, m := range mounts {
		_ = w.markFS(m) // hidden (ProtectHome=), gone, or unmarkable: the scan covers it
	}
	w.mu.Lock()
	n := len(w.marked)
	w.mu.Unlock()
	return n, errors.Join(errs...)
}

func (w *Watcher) markFS(p string) error {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return fmt.Errorf("execwatch: mark %s: %w", p, err)
	}
	w.mu.Lock()
	done := w.marked[st.Dev]
	w.mu.Unlock()
	if done {
		return nil
	}
	err := unix.FanotifyMark(int(w.f.Fd()), unix.FAN_MARK_ADD|unix.FAN_MARK_FILESYSTEM, unix.FAN_OPEN_EXEC, unix.AT_FDCWD, p)
	if err != nil {
		return fmt.Errorf("execwatch: mark the filesystem of %s: %w", p, err)
	}
	w.mu.Lock()
	w.marked[st.Dev] = true
	w.mu.Unlock()
	return nil
}

// execMounts lists the mount points of mountinfo where a program could be
// executed: not a pseudo filesystem, not mounted noexec.
func execMounts(mountinfo string) ([]string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("execwatch: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 1 || pseudoFS[g[0]] {
			continue
		}
		if hasOption(f[5], "noexec") {
			continue
		}
		out = append(out, unescapeMount(f[4]))
	}
	return out, sc.Err()
}

func hasOption(opts, o string) bool {
	for _, x := range strings.Split(opts, ",") {
		if x == o {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ErrOverflow is what Run's overflow callback is told: the kernel's queue
// overflowed (events were lost); the caller must scan /proc at once.
var ErrOverflow = errors.New("execwatch: the kernel's event queue overflowed; execs were missed")

// Run reads events until ctx ends or the watcher is closed, and sends each
// exec of a watched file to out (blocking: a full channel backs up into
// the kernel's queue, whose overflow is reported). overflow is called on
// each overflow. It returns nil when ctx ended or Close was called, else
// the read error.
func (w *Watcher) Run(ctx context.Context, out chan<- Exec, overflow func()) error {
	stop := context.AfterFunc(ctx, func() { _ = w.f.Close() })
	defer stop()
	buf := make([]byte, 64*1024)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return fmt.Errorf("execwatch: read: %w", err)
		}
		now := time.Now()
		for _, ev := range parse(buf[:n]) {
			if ev.overflow {
				overflow()
				continue
			}
			e, ok := w.resolve(ev, now)
			if !ok {
				continue
			}
			select {
			case out <- e:
			case <-ctx.Done():
				e.Close()
				return nil
			}
		}
	}
}

// event is one parsed fanotify event; fd and pidfd are ours to close.
type event struct {
	fd, pid, pidfd int
	overflow       bool
}

const metaLen = int(unsafe.Sizeof(unix.FanotifyEventMetadata{}))

// parse splits a read into events. Info records other than the pidfd are
// skipped.
func parse(b []byte) []event {
	var out []event
	for len(b) >= metaLen {
		m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&b[0]))
		l := int(m.Event_len)
		if l < metaLen || l > len(b) || m.Vers != unix.FANOTIFY_METADATA_VERSION {
			break
		}
		ev := event{fd: int(m.Fd), pid: int(m.Pid), pidfd: -1, overflow: m.Mask&unix.FAN_Q_OVERFLOW != 0}
		for info := b[int(m.Metadata_len):l]; len(info) >= 4; {
			typ, il := info[0], int(binary.NativeEndian.Uint16(info[2:4]))
			if il < 4 || il > len(info) {
				break
			}
			if typ == unix.FAN_EVENT_INFO_TYPE_PIDFD && il >= 8 {
				ev.pidfd = int(int32(binary.NativeEndian.Uint32(info[4:8])))
			}
			info = info[il:]
		}
		out = append(out, ev)
		b = b[l:]
	}
	return out
}

// resolve closes the event's descriptors except, for a watched exec, the
// pidfd, which goes with the Exec.
func (w *Watcher) resolve(ev event, now time.Time) (Exec, bool) {
	e := Exec{PID: ev.pid, Seen: now, pidfd: ev.pidfd}
	if ev.fd < 0 || ev.pid <= 0 {
		// pid 0: a process outside this PID namespace, nothing to signal.
		if ev.fd >= 0 {
			_ = unix.Close(ev.fd)
		}
		e.Close()
		return e, false
	}
	var st unix.Stat_t
	err := unix.Fstat(ev.fd, &st)
	p, lerr := os.Readlink("/proc/self/fd/" + strconv.Itoa(ev.fd))
	_ = unix.Close(ev.fd)
	if err != nil || lerr != nil {
		e.Close()
		return e, false
	}
	e.Path, e.File = strings.TrimSuffix(p, " (deleted)"), FileID{Dev: st.Dev, Ino: st.Ino}
	if !w.current().has(e.Path, e.File) {
		e.Close()
		return e, false
	}
	if e.pidfd < 0 {
		e.pidfd = -1 // FAN_NOPIDFD, FAN_EPIDFD: the process is gone or the kernel gave none
	}
	return e, true
}
