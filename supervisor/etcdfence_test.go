package supervisor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
	"github.com/kha-supervisor/kha-supervisor/supervisor"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// startCheck runs check, when set, before every unit start: what must
// already hold when a term's first unit starts.
type startCheck struct {
	*fencing.Memory
	check *atomic.Pointer[func()]
}

func (u startCheck) Start(ctx context.Context, unit string) error {
	if f := u.check.Load(); f != nil {
		(*f)()
	}
	return u.Memory.Start(ctx, unit)
}

// apiRole is the etcd role that lets the test's stand-in apiservers write
// under /registry/.
const apiRole = "kube-apiserver"

// withAuth turns etcd's auth on in w: a root user for the supervisors, the
// role apiRole and one user per node's stand-in kube-apiserver holding it.
// Members started from then on authenticate as root.
func withAuth(t *testing.T, w *world, nodes ...string) *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := w.Admin.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := w.Admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := w.Admin.RoleAdd(ctx, apiRole); return err },
		func() error {
			_, err := w.Admin.RoleGrantPermission(ctx, apiRole, "/registry/", clientv3.GetPrefixRangeEnd("/registry/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
	}
	for _, n := range nodes {
		steps = append(steps,
			func() error { _, err := w.Admin.UserAdd(ctx, "api-"+n, "api-pw"); return err },
			func() error { _, err := w.Admin.UserGrantRole(ctx, "api-"+n, apiRole); return err })
	}
	steps = append(steps, func() error { _, err := w.Admin.AuthEnable(ctx); return err })
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("auth set-up step %d: %v", i+1, err)
		}
	}
	w.Username, w.Password = "root", "root-pw"
	root, err := clientv3.New(clientv3.Config{Endpoints: w.Cluster.Endpoints(), DialTimeout: 2 * time.Second,
		Username: "root", Password: "root-pw", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

// hasWriterMark reports whether node's writer mark exists.
func hasWriterMark(t *testing.T, root *clientv3.Client, m *member, node string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := root.Get(ctx, m.Sup.Keys().Writer(node))
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Kvs) == 1
}

// apiserverOf is a client as node's stand-in kube-apiserver: straight to
// etcd, past the node's proxies, so that it outlives a cut of its
// supervisor as a paused-and-resumed master's apiserver does.
func apiserverOf(t *testing.T, w *world, node string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: w.Cluster.Endpoints(), DialTimeout: 2 * time.Second,
		Username: "api-" + node, Password: "api-pw", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func apiWrite(cli *clientv3.Client, key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := cli.Put(ctx, "/registry/"+key, "x")
	return err
}

func fenceAtEtcd(c *config.Config) {
	c.EtcdFence = config.EtcdFence{Role: apiRole, Users: []string{"m1=api-m1", "m2=api-m2"}}
}

// Issue 22, scenario 65: a master paused together with its kube-apiserver
// keeps requests its apiserver had admitted, and sends them when it
// resumes, after the other master's takeover; nothing on the node can stop
// them (the supervisor resumes at the same instant). With etcd_fence the
// new leader revokes the old master's apiserver's role before its units
// start, so etcd refuses whatever that apiserver still sends; the old
// master, back as a standby with its units down, grants it back.
func TestTakeoverFencesTheOldLeadersAPIServerAtEtcd(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	root := withAuth(t, w, "m1", "m2")
	var check atomic.Pointer[func()]
	w.Options = func(_ string, o *supervisor.Options) {
		o.Units = startCheck{Memory: o.Units.(*fencing.Memory), check: &check}
	}
	a, b := w.Start("m1", fenceAtEtcd), w.Start("m2", fenceAtEtcd)
	leader, others := leaderOf(t, a, b)
	next := others[0]
	oldAPI, newAPI := apiserverOf(t, w, leader.Name), apiserverOf(t, w, next.Name)
	if err := apiWrite(oldAPI, "before"); err != nil {
		t.Fatalf("the leader's apiserver cannot write before any fault: %v", err)
	}
	// Past a standby's recheck: a leader keeps its mark and its role.
	time.Sleep(11 * time.Second)
	if !hasWriterMark(t, root, leader, leader.Name) || apiWrite(oldAPI, "leading") != nil {
		t.Fatal("the leader lost its writer mark or its apiserver's role while it leads")
	}
	// Whatever starts next is the new term's: the old apiserver must be
	// fenced by then.
	// Only etcd's refusal counts as fenced: a timeout says nothing.
	var startedOpen atomic.Int32
	var otherErr atomic.Pointer[error]
	fn := func() {
		switch err := apiWrite(oldAPI, "at-start"); {
		case err == nil:
			startedOpen.Add(1)
		case !errors.Is(err, rpctypes.ErrPermissionDenied):
			otherErr.Store(&err)
		}
	}
	check.Store(&fn)

	leader.Cut(true) // its supervisor is gone from etcd; its apiserver is not
	if err := leader.WaitExit(t, 3*ttl, "fence when cut off"); err == nil {
		t.Fatal("the cut leader's Run returned nil, want a fence")
	}
	waitFor(t, "the takeover", 4*ttl, func() bool { return next.Units.Running(units[0]) && next.Units.Running(units[1]) })
	// The old term's writer, alive after the new term's units started.
	err := apiWrite(oldAPI, "late")
	if err == nil {
		t.Fatal("the old leader's apiserver wrote after the takeover: a write of the old term committed after the new term began")
	}
	if !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("the old leader's apiserver's write failed with %v, want etcd's permission denied", err)
	}
	if err := apiWrite(newAPI, "new"); err != nil {
		t.Fatalf("the new leader's apiserver cannot write: %v", err)
	}
	if n := startedOpen.Load(); n != 0 {
		t.Fatalf("the old leader's apiserver could still write when %d of the new term's units started", n)
	}
	if e := otherErr.Load(); e != nil {
		t.Fatalf("the old leader's apiserver's write as a unit started failed with %v, want etcd's permission denied", *e)
	}
	check.Store(nil)

	// The old master's supervisor comes back (the daemon's restart after
	// its fence) with its units down: its apiserver gets the role back.
	back := w.Start(leader.Name, fenceAtEtcd)
	waitFor(t, "the old master's apiserver to be granted back", 4*ttl, func() bool { return apiWrite(oldAPI, "back") == nil })
	if back.Units.Running(units[0]) || back.Units.Running(units[1]) {
		t.Fatal("the returning master runs units")
	}
	waitFor(t, "the old master's writer mark to go", 2*ttl, func() bool { return !hasWriterMark(t, root, next, leader.Name) })
}

// A handover whose old leader says its units are stopped (a graceful stop)
// leaves that master's apiserver alone: its components are down and its
// record says so; only a master that could not say so is fenced at etcd.
func TestCleanHandoverLeavesTheOldLeadersAPIServerAlone(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	root := withAuth(t, w, "m1", "m2")
	a, b := w.Start("m1", fenceAtEtcd), w.Start("m2", fenceAtEtcd)
	leader, others := leaderOf(t, a, b)
	next := others[0]
	oldAPI := apiserverOf(t, w, leader.Name)
	leader.Cancel() // graceful stop: units down, record says so, lease released
	if err := leader.WaitExit(t, 3*ttl, "graceful stop"); err != nil {
		t.Fatalf("graceful stop returned %v", err)
	}
	waitFor(t, "the takeover", 4*ttl, func() bool { return next.Units.Running(units[0]) && next.Units.Running(units[1]) })
	if err := apiWrite(oldAPI, "after-handover"); err != nil {
		t.Fatalf("the old leader's apiserver was fenced after a clean handover: %v", err)
	}
	if hasWriterMark(t, root, next, leader.Name) {
		t.Fatal("the old leader's writer mark outlived its clean handover")
	}
}

// Issue 22 review, three masters: the old leader A is paused (cut off for
// good); B takes over, but A's apiserver ends up with its role (here granted
// by hand, as if B's promotion had failed before its revoke); then B is
// paused too and C takes over. C must fence A's apiserver as well: A's
// writer mark outlives B's term, whoever C's previous holder was.
func TestEveryPromotionFencesEveryMasterThatMayStillWrite(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	root := withAuth(t, w, "m1", "m2", "m3")
	fence3 := func(c *config.Config) {
		c.EtcdFence = config.EtcdFence{Role: apiRole, Users: []string{"m1=api-m1", "m2=api-m2", "m3=api-m3"}}
	}
	ms := []*member{w.Start("m1", fence3), w.Start("m2", fence3), w.Start("m3", fence3)}
	a, rest := leaderOf(t, ms...)
	a.Kill()
	b, rest := leaderOf(t, rest...)
	c := rest[0]
	if !hasWriterMark(t, root, b, a.Name) {
		t.Fatalf("%s's writer mark is gone while it is cut off", a.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := root.UserGrantRole(ctx, "api-"+a.Name, apiRole); err != nil {
		t.Fatal(err)
	}
	if err := apiWrite(apiserverOf(t, w, a.Name), "regranted"); err != nil {
		t.Fatalf("the hand grant did not take: %v", err)
	}
	b.Kill()
	waitFor(t, "the third master's takeover", 4*ttl, func() bool { return c.Units.Running(units[0]) && c.Units.Running(units[1]) })
	for _, old := range []*member{a, b} {
		if err := apiWrite(apiserverOf(t, w, old.Name), "late"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("%s's apiserver after the third master's takeover: %v, want etcd's permission denied", old.Name, err)
		}
	}
}
