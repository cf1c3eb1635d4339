package plane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/audit"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/commits"
	"github.com/kha-supervisor/kha-supervisor/lab/master"
	"github.com/kha-supervisor/kha-supervisor/lab/report"
)

// The judge at etcd (lab/kube/commits) next to the one at the audit logs:
// every trial records what etcd commits under the plane's prefix from just
// before the fault until its judgement, and fails on a write of a term
// committed after the next term's first write.

// commitRecording follows the plane's keys in etcd during one trial.
type commitRecording struct {
	cli *clientv3.Client
	rec *commits.Recorder
}

// recordCommits starts following the plane's keys from the current
// revision (from the observer's namespace, which no fault touches).
func (p *Plane) recordCommits(ctx context.Context) (*commitRecording, error) {
	cli, err := p.Lab.Etcd.Client()
	if err != nil {
		return nil, err
	}
	rec, err := commits.Start(ctx, cli, EtcdPrefix)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &commitRecording{cli: cli, rec: rec}, nil
}

// stop reads the recording up to etcd's current revision.
func (c *commitRecording) stop(ctx context.Context) (commits.Recording, error) {
	defer c.cli.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return c.rec.Stop(ctx)
}

// Hosts maps the masters' host names (the components' leader-election
// identities, their events' hosts) to the masters.
func (p *Plane) Hosts() map[string]string {
	out := map[string]string{}
	for _, m := range lab.MasterNames {
		out[master.MachineName(p.Lab.Config().Prefix, m)] = m
	}
	return out
}

// judgeCommits judges the trial at etcd: rec (nil: the recording did not
// start, already a problem of the trial) against the audit logs over the
// audit judge's window.
func (r *Runner) judgeCommits(ctx context.Context, rec *commitRecording, res *report.Result, end time.Time) {
	if rec == nil {
		return
	}
	recording, err := rec.stop(ctx)
	if err != nil {
		res.Problems = append(res.Problems, "etcd judge: "+err.Error())
		return
	}
	evs, err := audit.ReadFiles(r.P.AuditLogs())
	if err != nil {
		res.Problems = append(res.Problems, "etcd judge: "+err.Error())
		return
	}
	o := commits.Options{Masters: r.P.MasterIPs(), Hosts: r.P.Hosts(), From: res.FaultAt.Add(-judgedBefore), To: end}
	applyCommits(res, commits.Judge(recording, evs, o))
	if dir := os.Getenv(KeepCommitsEnv); dir != "" {
		path, err := r.keepCase(dir, recording, res)
		if err != nil {
			res.Problems = append(res.Problems, "etcd judge: keep the case: "+err.Error())
		} else {
			res.Notes = append(res.Notes, "etcd judge: case kept in "+path)
		}
	}
}

// KeepCommitsEnv names a directory each trial keeps its etcd judge's case
// in (commits.Case: the recording, the audit lines of its writes from a
// minute before the fault up to the judgement, the attribution), for
// lab/kube/commits' tests and for a second look at a verdict.
const KeepCommitsEnv = "KHA_KEEP_COMMITS"

func (r *Runner) keepCase(dir string, rec commits.Recording, res *report.Result) (string, error) {
	c := commits.Case{Recording: rec, Audit: map[string][]string{}, Masters: r.P.MasterIPs(), Hosts: r.P.Hosts()}
	for m, p := range r.P.AuditLogs() {
		lines, err := commits.AuditLines(p, res.FaultAt.Add(-time.Minute), time.Now())
		if err != nil {
			return "", err
		}
		c.Audit[m] = lines
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("%d-%s-%d-%s.json.gz", res.ID, res.Mode, res.Repeat, res.FaultAt.UTC().Format("150405")))
	return path, c.Save(path)
}

// maxListed bounds the writes a result lists by name.
const maxListed = 10

// applyCommits fills res with the verdict at etcd.
func applyCommits(res *report.Result, rep commits.Report) {
	res.Etcd = rep.String()
	res.LateCommits, res.GhostWrites = len(rep.Late), len(rep.Ghosts)
	// The overlap at the resource replaces the audit log's: writes etcd
	// committed are timed at their arrival (commits.resourceOverlaps).
	res.Overlaps = res.Overlaps[:0]
	for _, o := range rep.Overlaps {
		res.Overlaps = append(res.Overlaps, o.String())
	}
	for _, o := range rep.AuditOnly {
		res.Notes = append(res.Notes, "audit log only, not at the resource (answered late, committed before): "+o.String())
	}
	for i, l := range rep.Late {
		if i == maxListed {
			res.LateList = append(res.LateList, fmt.Sprintf("... and %d more", len(rep.Late)-i))
			break
		}
		res.LateList = append(res.LateList, l.String())
	}
	for i, g := range rep.Ghosts {
		if i == maxListed {
			res.GhostList = append(res.GhostList, fmt.Sprintf("... and %d more", len(rep.Ghosts)-i))
			break
		}
		res.GhostList = append(res.GhostList, g.String())
	}
	for _, p := range rep.Problems {
		res.Problems = append(res.Problems, "etcd judge: "+p)
	}
}

// verdict decides the trial from both judges' figures: it passes only
// without problems and without harm, and harm includes any late commit at
// etcd. Leader election fences nothing: its harm is the comparison's
// finding, not a failure of the lab.
func verdict(res *report.Result, mode Mode) {
	harm := len(res.Overlaps) > 0 || res.DoubleBind > 0 || res.ExtraRS > 0 || res.Stale > 0 || res.LateCommits > 0
	res.Pass = len(res.Problems) == 0 && !harm
	if harm && mode.LeaderElect {
		res.Finding = "leader election let both masters' writes through (no fencing)"
	}
}
