package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
	"github.com/kha-supervisor/kha-supervisor/layout"
	"github.com/kha-supervisor/kha-supervisor/packaging/dropin"
)

const pkgName = "kha-supervisor"

// sourceRoot is the source tree the lab was started from (the parent of
// its packaging directory): scenario 22 builds packages from it.
func (r *Run) sourceRoot() (string, error) {
	p := r.Lab.Config().Packaging
	if p == "" {
		p = "packaging"
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("source tree: %w", err)
	}
	root := filepath.Dir(abs)
	if _, err := os.Stat(filepath.Join(root, "packaging", "mkpkg", "main.go")); err != nil {
		return "", fmt.Errorf("building packages needs the source tree (give --packaging DIR/packaging): %w", err)
	}
	return root, nil
}

// mkpkg runs the project's package builder in root.
func mkpkg(ctx context.Context, root string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"run", "./packaging/mkpkg"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go run ./packaging/mkpkg %s: %w: %s", strings.Join(args, " "), err, lastLines(stderr.String(), 2000))
	}
	return strings.TrimSpace(string(out)), nil
}

// buildDeb builds the .deb of version for this machine's architecture into
// dir and returns its path.
func buildDeb(ctx context.Context, root, dir, version string) (string, error) {
	out, err := mkpkg(ctx, root, "-out", dir, "-arch", runtime.GOARCH, "-format", "deb", "-version", version)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if p, _, _ := strings.Cut(line, "\t"); strings.HasSuffix(p, ".deb") {
			if !filepath.IsAbs(p) {
				p = filepath.Join(root, p)
			}
			return p, nil
		}
	}
	return "", fmt.Errorf("mkpkg printed no .deb: %q", out)
}

var upRE = regexp.MustCompile(`^(.*[.+])up([0-9]+)$`)

// bumpVersion returns a version dpkg orders right after v: "+up1" appended
// to a release, ".up1" to a build that already carries "+...", and an
// existing upN suffix counted up (a second run of the scenario).
func bumpVersion(v string) string {
	if m := upRE.FindStringSubmatch(v); m != nil {
		n, _ := strconv.Atoi(m[2])
		return m[1] + "up" + strconv.Itoa(n+1)
	}
	if strings.Contains(v, "+") {
		return v + ".up1"
	}
	return v + "+up1"
}

// installedVersion is the kha-supervisor package version installed in node
// ("" when the package is not installed).
func installedVersion(ctx context.Context, n *master.Node) string {
	out, code := n.Run(ctx, "dpkg-query", "-W", "-f", "${db:Status-Abbrev}|${Version}", pkgName)
	if code != 0 {
		return ""
	}
	st, v, ok := strings.Cut(strings.TrimSpace(out), "|")
	if !ok || !strings.HasPrefix(st, "ii") {
		return ""
	}
	return v
}

// shared copies a host file into the lab's shared dist directory and
// returns its path inside the masters.
func (r *Run) shared(hostPath string) (string, error) {
	dir := r.Lab.SharedPath("dist")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("scenario: %w", err)
	}
	b, err := os.ReadFile(hostPath)
	if err != nil {
		return "", fmt.Errorf("scenario: %w", err)
	}
	dst := filepath.Join(dir, filepath.Base(hostPath))
	if _, err := os.Stat(dst); errors.Is(err, os.ErrNotExist) {
		// Ours: removed after the scenario (a package the lab was brought
		// up with stays).
		r.Undo(func(context.Context) error { return os.Remove(dst) })
	}
	if err := os.WriteFile(dst+".tmp", b, 0o644); err != nil {
		return "", fmt.Errorf("scenario: %w", err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		return "", fmt.Errorf("scenario: %w", err)
	}
	return master.LabDir + "/dist/" + filepath.Base(hostPath), nil
}

// dpkg runs dpkg with args inside node and fails on a non-zero exit.
func (r *Run) dpkg(ctx context.Context, node string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, code := r.Nodes[node].Run(cctx, append([]string{"dpkg"}, args...)...)
	r.Log.Info("scenario: dpkg", "scenario", r.Res.ID, "node", node, "args", args, "exit", code)
	if code != 0 {
		return out, fmt.Errorf("%s: dpkg %s: exit %d: %s", node, strings.Join(args, " "), code, strings.TrimSpace(out))
	}
	return out, nil
}

// prepareBase makes sure both masters have the kha-supervisor package
// installed (a lab brought up without --deb runs the bare binary): the
// missing ones get a package of base built now. A fresh install neither
// starts nor restarts the supervisor, so the running one is untouched.
func (r *Run) prepareBase(ctx context.Context, root, dir, base string) error {
	var missing []string
	for _, name := range lab.MasterNames {
		if installedVersion(ctx, r.Nodes[name]) == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	deb, err := buildDeb(ctx, root, dir, base)
	if err != nil {
		return err
	}
	in, err := r.shared(deb)
	if err != nil {
		return err
	}
	for _, name := range missing {
		// The lab wrote the configuration before any package owned it:
		// keep it (the package's copy is the example).
		if _, err := r.dpkg(ctx, name, "--force-confold", "-i", in); err != nil {
			return err
		}
	}
	r.Notef("installed the %s package (%s) on %v, which ran the bare binary; no restart", pkgName, base, missing)
	return nil
}

func packageUpgrade(ctx context.Context, r *Run) error {
	pkg, err := r.buildUpgrade(ctx)
	if err != nil {
		return err
	}
	fault, err := r.upgradeLeader(ctx, pkg)
	if err != nil {
		return err
	}
	// The guard on the standby after the upgrade (scenario 9, again).
	if err := r.resteady(ctx); err != nil {
		return err
	}
	r.guardRefuses(ctx, r.Standby, r.Leader)

	leader := r.Leader
	if err := r.removeLeader(ctx, fault); err != nil {
		return err
	}
	return r.purgeAndReinstall(ctx, leader, pkg)
}

// upgradePkg is scenario 22's higher version, built for this run.
type upgradePkg struct {
	version string // the higher version
	deb     string // its package on the host
	shared  string // the same inside the masters
}

// buildUpgrade builds a package of a version higher than the installed one
// (the last clean-up step, registered first, removes it) and makes sure no
// master is left without a supervisor whatever happens next.
func (r *Run) buildUpgrade(ctx context.Context) (upgradePkg, error) {
	root, err := r.sourceRoot()
	if err != nil {
		return upgradePkg{}, err
	}
	if err := r.allowServiceActions(); err != nil {
		return upgradePkg{}, err
	}
	if err := os.MkdirAll(r.Lab.OutDir(), 0o755); err != nil {
		return upgradePkg{}, fmt.Errorf("scenario: %w", err)
	}
	dir, err := os.MkdirTemp(r.Lab.OutDir(), "debs-")
	if err != nil {
		return upgradePkg{}, fmt.Errorf("scenario: %w", err)
	}
	r.Undo(func(context.Context) error { return os.RemoveAll(dir) })
	base := installedVersion(ctx, r.Nodes[r.Leader])
	if base == "" {
		if base, err = mkpkg(ctx, root, "-print-version"); err != nil {
			return upgradePkg{}, err
		}
	}
	built := time.Now()
	if err := r.prepareBase(ctx, root, dir, base); err != nil {
		return upgradePkg{}, err
	}
	up := bumpVersion(base)
	if _, code := r.Nodes[r.Leader].Run(ctx, "dpkg", "--compare-versions", up, "gt", base); code != 0 {
		return upgradePkg{}, fmt.Errorf("version %s does not sort after %s", up, base)
	}
	upDeb, err := buildDeb(ctx, root, dir, up)
	if err != nil {
		return upgradePkg{}, err
	}
	r.Metric("build", time.Since(built))
	upIn, err := r.shared(upDeb)
	if err != nil {
		return upgradePkg{}, err
	}
	// Whatever happens below, no master is left without a supervisor.
	r.Undo(func(ctx context.Context) error {
		var errs []error
		for _, name := range lab.MasterNames {
			if installedVersion(ctx, r.Nodes[name]) == "" {
				errs = append(errs, r.Lab.InstallPackage(ctx, r.Nodes[name], upDeb))
			}
		}
		return errors.Join(errs...)
	})
	return upgradePkg{version: up, deb: upDeb, shared: upIn}, nil
}

// upgradeLeader runs dpkg -i of the higher version on the leader while
// everything runs and checks the handoff it makes and the upgraded node's
// return; it returns the fault instant.
func (r *Run) upgradeLeader(ctx context.Context, pkg upgradePkg) (time.Time, error) {
	up := pkg.version
	old, other := r.Leader, r.Standby
	var took time.Duration
	fault, err := r.Fault(fmt.Sprintf("dpkg -i %s %s on the leader %s", pkgName, up, old), func() error {
		t := time.Now()
		out, err := r.dpkg(ctx, old, "-i", pkg.shared)
		took = time.Since(t)
		if err == nil && strings.Contains(out, "restart after upgrade failed") {
			err = fmt.Errorf("postinst: %s", strings.TrimSpace(out))
		}
		return err
	})
	if err != nil {
		return time.Time{}, err
	}
	r.Metric("dpkg_upgrade", took)
	// The other node takes over, unless its promotion fails (a unit start
	// refused by this host's systemd: 219/CGROUP); then it sits out its
	// cooldown and the upgraded node, back after its restart, may win.
	winner, err := r.Failover(ctx, fault, other, old)
	if err != nil {
		return time.Time{}, err
	}
	r.expectStoppedBeforeWin()
	wantState := group.Standby
	if winner == old {
		if !r.promotionFailedSince(fault) {
			r.Failf("the upgraded %s won again although %s's promotion did not fail", old, other)
		}
		r.Notef("%s's promotion failed; the upgraded %s won again after its restart", other, old)
		wantState = group.Active
	}
	err = WaitFor(ctx, r.steadyTimeout(), old+" back on "+up, func() (bool, string) {
		rec, ok := r.Obs.Now().Records[old]
		return ok && rec.State == wantState && rec.Version == up, fmt.Sprintf("%s version %q", describe(rec, ok), rec.Version)
	})
	if err != nil {
		return time.Time{}, err
	}
	if out, code := r.kha(ctx, old, "version"); code != 0 || out != up {
		r.Failf("`kha-supervisor version` on %s: %q (exit %d), want %s", old, out, code, up)
	}
	if v := installedVersion(ctx, r.Nodes[old]); v != up {
		r.Failf("dpkg on %s says %q is installed, want %s", old, v, up)
	}
	note := fmt.Sprintf("upgraded %s to %s in %s (dpkg -i); %s took over; %s came back as %s on %s", old, up, took.Round(time.Millisecond), winner, old, wantState, up)
	r.Notef("%s", note)
	r.Res.Figures.Upgrades = append(r.Res.Figures.Upgrades, note)
	return fault, nil
}

// removeLeader runs dpkg -r on the leader: prerm stops the supervisor
// (units stopped, lease released), the standby takes over; the removal's
// standard figures get a remove_ prefix beside the upgrade's (fault).
func (r *Run) removeLeader(ctx context.Context, fault time.Time) error {
	leader, standby := r.Leader, r.Standby
	saved := maps.Clone(r.Res.Metrics)
	fault2, err := r.Fault("dpkg -r "+pkgName+" on the leader "+leader, func() error {
		_, err := r.dpkg(ctx, leader, "-r", pkgName)
		return err
	})
	if err != nil {
		return err
	}
	r.Res.FaultAt = fault
	if _, err := r.Failover(ctx, fault2, standby); err != nil {
		return err
	}
	r.expectStoppedBeforeWin()
	second := maps.Clone(r.Res.Metrics)
	for _, k := range []string{report.MStopped, report.MWon, report.MFailover, report.MMargin, report.MGap} {
		delete(r.Res.Metrics, k)
		if v, ok := second[k]; ok {
			r.Res.Metrics["remove_"+k] = v
		}
		if v, ok := saved[k]; ok {
			r.Res.Metrics[k] = v
		}
	}
	n := r.Nodes[leader]
	if out, _ := n.Run(ctx, "systemctl", "show", "-P", "LoadState", lab.SupervisorUnit); strings.TrimSpace(out) != "not-found" {
		r.Failf("%s after dpkg -r: %s LoadState %q, want not-found", leader, lab.SupervisorUnit, strings.TrimSpace(out))
	}
	err = WaitFor(ctx, r.steadyTimeout(), leader+"'s member record gone", func() (bool, string) {
		_, ok := r.Obs.Now().Records[leader]
		return !ok, "still published"
	})
	if err != nil {
		r.Failf("%v", err)
	}
	// Nothing may start on the node without its supervisor.
	if err := Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	_ = r.W.Refresh()
	for _, u := range Units() {
		if _, ok := r.W.FirstStart(leader, u, fault2); ok {
			r.Failf("%s started on %s after the package was removed", u, leader)
		}
	}
	return nil
}

// purgeAndReinstall checks that dpkg --purge removes the configuration and
// the drop-ins, then puts the package back on leader (standby again).
func (r *Run) purgeAndReinstall(ctx context.Context, leader string, pkg upgradePkg) error {
	n, up := r.Nodes[leader], pkg.version
	// Purge: the configuration and the drop-ins install-dropins wrote go.
	if _, err := r.dpkg(ctx, leader, "--purge", pkgName); err != nil {
		return err
	}
	if _, err := os.Stat(n.Root() + filepath.Dir(layout.ConfigPath)); !errors.Is(err, os.ErrNotExist) {
		r.Failf("%s after dpkg --purge: /etc/kha-supervisor still there (%v)", leader, err)
	}
	for _, w := range lab.Witnesses {
		p := dropin.Path("/etc/systemd/system", w.Service())
		if _, err := os.Stat(n.Root() + p); !errors.Is(err, os.ErrNotExist) {
			r.Failf("%s after dpkg --purge: %s still there (%v)", leader, p, err)
		}
	}
	r.Mark(time.Now(), leader, "purged")

	// Back to the lab's normal state: the package (the new version) on
	// both, configured, running as standby.
	reinstall := time.Now()
	if err := r.Lab.InstallPackage(ctx, n, pkg.deb); err != nil {
		return err
	}
	err := WaitFor(ctx, r.steadyTimeout(), leader+" reinstalled, standby", func() (bool, string) {
		rec, ok := r.Obs.Now().Records[leader]
		return ok && rec.State == group.Standby && rec.Version == up, describe(rec, ok)
	})
	if err != nil {
		return err
	}
	r.Metric("reinstall", time.Since(reinstall))
	return nil
}

// guardRefuses checks that `systemctl start kube-scheduler.service` on the
// standby node is refused by the guard with a message naming leader. As in
// scenario 9, the standby's own enforcement may stop the unit in start-pre
// before the guard answers (the start is refused all the same, silently):
// a few attempts.
func (r *Run) guardRefuses(ctx context.Context, node, leader string) {
	n := r.Nodes[node]
	unit := scheduler + ".service"
	defer func() { _, _ = n.Systemctl(ctx, "reset-failed", unit) }()
	for i := 1; i <= 3; i++ {
		at := time.Now()
		out, code := n.Run(ctx, "systemctl", "start", unit)
		if code == 0 {
			r.Failf("systemctl start %s on the standby %s succeeded", unit, node)
			return
		}
		if err := Sleep(ctx, 300*time.Millisecond); err != nil {
			return
		}
		for _, line := range strings.Split(r.JournalSince(ctx, node, unit, at), "\n") {
			if strings.Contains(line, "refusing") && strings.Contains(line, leader) {
				note := fmt.Sprintf("guard on %s refused (systemctl exit %d): %s", node, code, strings.TrimSpace(line))
				r.Notef("%s", note)
				r.Res.Figures.GuardAnswers = append(r.Res.Figures.GuardAnswers, note)
				return
			}
		}
		r.Notef("guard attempt %d on %s: systemctl said %q; no guard message (stopped in start-pre first)", i, node, strings.TrimSpace(out))
		_, _ = n.Systemctl(ctx, "reset-failed", unit)
	}
	r.Failf("no refusal naming the leader %s from the guard on %s in 3 attempts", leader, node)
}

// lastLines is the end of s, at most n bytes.
func lastLines(s string, n int) string {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}

// policyRCD is Debian's hook for "may maintainer scripts start or restart
// services". The masters boot the host's OS, and a host built from a
// container image often carries one that forbids everything (exit 101):
// deb-systemd-invoke then silently skips the postinst's try-restart, so an
// upgrade would leave the old supervisor running. A real master has none.
const policyRCD = "/usr/sbin/policy-rc.d"

// allowServiceActions removes policy-rc.d from every master for the
// scenario (it is put back afterwards), and says so.
func (r *Run) allowServiceActions() error {
	for _, name := range lab.MasterNames {
		n := r.Nodes[name]
		p := n.Root() + policyRCD
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("scenario: %w", err)
		}
		if err := n.RemoveFile(policyRCD); err != nil {
			return err
		}
		r.Undo(func(context.Context) error { return n.WriteFile(policyRCD, b, 0o755) })
		r.Notef("removed %s on %s for the scenario (inherited from the host; it forbids the postinst's restart)", policyRCD, name)
	}
	return nil
}
