package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/internal/supervisortest"
)

// TestOperatorBanGuards: ban refuses what would leave nobody running
// (issue 9, items 2 and 3), says who takes over, and --force overrides.
func TestOperatorBanGuards(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, others := supervisortest.LeaderOf(t, a, b)
	standby := others[0]
	expect := func(code int, want string, args ...string) string {
		t.Helper()
		got, out := cli(t, w, args...)
		if got != code || !strings.Contains(out, want) {
			t.Fatalf("$ kha-supervisor %s: exit %d, want %d and %q:\n%s", strings.Join(args, " "), got, code, want, out)
		}
		return out
	}

	// The shells complete node names from etcd.
	cfg := w.ConfigFile("m1")
	for _, line := range [][]string{{"__complete", "ban", "-c", cfg, ""}, {"__complete", "handoff", "-c", cfg, "--to", ""}} {
		var buf bytes.Buffer
		dispatch(env{ctx: context.Background(), stdout: &buf, stderr: io.Discard}, line)
		if buf.String() != "m1\nm2\n:4\n" {
			t.Errorf("completion of %q: %q, want m1 and m2 without file names", line, buf.String())
		}
	}

	// Unknown members: refused unless --force.
	expect(exitConfig, `refused: no live member named "m9" in cluster "test"; did you mean m1 or m2?`, "ban", "m9")
	expect(exitConfig, `refused: no live member named "node-1" in cluster "test" (see`, "ban", "node-1")
	expect(exitConfig, `refused: "m9" is neither a live member nor banned`, "unban", "m9")
	out := expect(exitOK, "banned m9 until ", "ban", "m9", "--force", "--for", "26h")
	// A 26 h ban shows its date and zone.
	if !regexp.MustCompile(`until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+;`).MatchString(out) {
		t.Errorf("ban --for 26h does not show the expiry date and zone: %q", out)
	}
	expect(exitOK, "unbanned m9", "unban", "m9")

	// Banning the standby: the leader keeps leading. Then the leader is the
	// last eligible member, and banning it is refused.
	expect(exitOK, "banned "+standby.Name+" until `kha-supervisor unban "+standby.Name+"`; "+leader.Name+" keeps leading", "ban", standby.Name)
	expect(exitConfig, "refused: banning "+leader.Name+" would leave no eligible member", "ban", leader.Name)
	expect(exitOK, "unbanned "+standby.Name, "unban", standby.Name)

	// Frozen: a banned leader would step down and nobody may take over.
	expect(exitOK, "frozen", "freeze", "--reason", "etcd upgrade")
	expect(exitConfig, "refused: the group is frozen (etcd upgrade)", "ban", leader.Name)
	if leader.State() != group.Active {
		t.Fatalf("the refused ban moved the leader: %s", leader.State())
	}
	expect(exitOK, "unfrozen", "unfreeze")

	// A ban that is allowed names the successor, who takes over.
	expect(exitOK, "it steps down; "+standby.Name+" takes over", "ban", leader.Name)
	supervisortest.WaitFor(t, "the standby to take over from the banned leader", 20*time.Second, func() bool {
		return standby.State() == group.Active
	})
	supervisortest.AssertNoOverlap(t, a, b)

	// Banning the last eligible member needs --force; status then warns
	// and exits 8 once nobody runs the units.
	expect(exitConfig, "refused: banning "+standby.Name+" would leave no eligible member", "ban", standby.Name)
	expect(exitOK, "nobody is eligible to take over", "ban", standby.Name, "--force")
	supervisortest.WaitFor(t, "the last leader to step down", 20*time.Second, func() bool {
		return standby.State() == group.Standby
	})
	code, out := cli(t, w, "status")
	if code != exitNoActive || !strings.Contains(out, "WARNING: no member is eligible to run the units") ||
		!strings.Contains(out, "kha-supervisor: status 8: no member holds the lease") {
		t.Fatalf("status with everybody banned: exit %d:\n%s", code, out)
	}
}

// TestStatusColumns: status reads the lease live, shows host, token, record
// age and a unit summary per member, and exits by what it found (item 4).
func TestStatusColumns(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	a, b := w.Start("m1", nil), w.Start("m2", nil)
	leader, _ := supervisortest.LeaderOf(t, a, b)
	supervisortest.WaitFor(t, "the leader's record to show its units active", 20*time.Second, func() bool {
		_, out := cli(t, w, "status")
		return strings.Contains(out, "2/2 active")
	})
	code, out := cli(t, w, "status")
	if code != exitOK {
		t.Fatalf("status: exit %d\n%s", code, out)
	}
	host, _ := os.Hostname()
	header := regexp.MustCompile(`NODE +HOST +ROLE +STATE +UNITS +LEASE LEFT +TOKEN +RECORD AGE +VERSION +SINCE +NOTE`)
	row := regexp.MustCompile(`(?m)^` + leader.Name + ` +` + regexp.QuoteMeta(host) + ` +leader +active +2/2 active +(\S+) +(\d+) +(\S+) `)
	m := row.FindStringSubmatch(out)
	if !header.MatchString(out) || m == nil {
		t.Fatalf("status table lacks the header or the leader's row:\n%s", out)
	}
	// LEASE LEFT is etcd's figure, the one in the first line, not the
	// record's (which is as old as the record).
	if !strings.Contains(out, "lease "+m[1]+" left in etcd") {
		t.Errorf("leader row's lease %s is not etcd's:\n%s", m[1], out)
	}
	if _, err := time.ParseDuration(m[3]); err != nil {
		t.Errorf("record age %q is not a duration", m[3])
	}
	if !regexp.MustCompile(`(?m)^m\d +\S+ +standby +standby +0/2 active +- +- +\S+ `).MatchString(out) {
		t.Errorf("status lacks the standby's row:\n%s", out)
	}
	if code, out = cli(t, w, "status", "-o", "wide"); code != exitOK || !strings.Contains(out, strings.TrimSuffix(supervisortest.Units[0], ".service")+"=active") {
		t.Errorf("status -o wide: exit %d, no unit list:\n%s", code, out)
	}
	if code, out = cli(t, w, "status", "-o", "yaml"); code != exitConfig || !strings.Contains(out, `-o "yaml": want wide or json`) {
		t.Errorf("status -o yaml: exit %d\n%s", code, out)
	}

	// Exit codes for scripts: this node without a record; a wrong cluster.
	var buf bytes.Buffer
	code = dispatch(env{ctx: context.Background(), stdout: &buf, stderr: &buf}, []string{"status", "-c", w.ConfigFile("m7")})
	if code != exitLocalBad || !strings.Contains(buf.String(), "kha-supervisor: status 9: this node m7 has no member record") {
		t.Errorf("status on a node without a member: exit %d\n%s", code, buf.String())
	}
	code, out = cli(t, w, "status", "--cluster", "other")
	if code != exitNoActive || !strings.Contains(out, `no member is registered under /kha-supervisor/other/members/: wrong cluster ("other") or etcd.prefix ("/kha-supervisor")?`) {
		t.Errorf("status of an empty cluster: exit %d\n%s", code, out)
	}

	// --watch prints again until interrupted.
	buf.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	code = dispatch(env{ctx: ctx, stdout: &buf, stderr: &buf}, []string{"status", "--watch", "--interval", "300ms", "-c", w.ConfigFile("m1")})
	if n := strings.Count(buf.String(), "\n--- "); code != exitOK || n < 2 || strings.Count(buf.String(), "cluster test: leader") != n+1 {
		t.Errorf("status --watch: exit %d, %d frames:\n%s", code, n, buf.String())
	}
}

// TestStatusHistoryZone: history times carry the zone of TZ (item 4).
func TestStatusHistoryZone(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	supervisortest.LeaderOf(t, w.Start("m1", nil))
	old := time.Local
	time.Local = time.FixedZone("KHT", 5*3600+1800)
	defer func() { time.Local = old }()
	code, out := cli(t, w, "history")
	if code != exitOK || !regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} KHT +m1 `).MatchString(out) {
		t.Fatalf("history times lack the zone: exit %d\n%s", code, out)
	}
}

// TestOperatorWithoutConfig: the client commands work with etcdctl's flags
// or KHA_* variables and no configuration file, and a daemon-only key never
// stops them (item 5).
func TestOperatorWithoutConfig(t *testing.T) {
	w := supervisortest.NewWorld(t, 1)
	leader, _ := supervisortest.LeaderOf(t, w.Start("m1", nil))
	old := clientDefaultPath
	clientDefaultPath = "/nonexistent/kha-supervisor/config.toml"
	defer func() { clientDefaultPath = old }()
	eps := strings.Join(w.Cluster.Endpoints(), ",")
	run := func(vars map[string]string, args ...string) (int, string) {
		t.Helper()
		var out bytes.Buffer
		code := dispatch(env{ctx: context.Background(), stdout: &out, stderr: &out, getenv: func(k string) string { return vars[k] }}, args)
		t.Logf("$ kha-supervisor %s -> %d\n%s", strings.Join(args, " "), code, out.String())
		return code, out.String()
	}
	// One member: status exits 10 (no standby), with the group shown.
	if code, out := run(nil, "status", "--endpoints", eps, "--cluster", "test"); code != exitNoStandby || !strings.Contains(out, "cluster test: leader "+leader.Name) {
		t.Errorf("status --endpoints without a configuration: exit %d", code)
	}
	vars := map[string]string{"KHA_ENDPOINTS": eps, "KHA_CLUSTER": "test"}
	if code, out := run(vars, "history", "--limit", "1"); code != exitOK || !strings.Contains(out, "TIME") {
		t.Errorf("history with KHA_ENDPOINTS: exit %d", code)
	}
	if code, out := run(vars, "freeze", "--reason", "from a laptop"); code != exitOK || !strings.Contains(out, "frozen") {
		t.Errorf("freeze with KHA_ENDPOINTS: exit %d", code)
	}
	if code, _ := run(vars, "unfreeze"); code != exitOK {
		t.Errorf("unfreeze with KHA_ENDPOINTS: exit %d", code)
	}
	// Without a file and without endpoints: the missing file, and the way out.
	if code, out := run(nil, "status"); code != exitConfig || !strings.Contains(out, "/nonexistent/kha-supervisor/config.toml: cannot read") ||
		!strings.Contains(out, "pass --endpoints") {
		t.Errorf("status without anything: exit %d", code)
	}
	// Flags are checked like the keys they override.
	if code, out := run(vars, "status", "--cacert", "ca.pem"); code != exitConfig || !strings.Contains(out, "etcd.ca") || !strings.Contains(out, "must be an absolute path") {
		t.Errorf("status --cacert relative: exit %d", code)
	}
	if code, out := run(vars, "status", "--user", "ops"); code != exitConfig || !strings.Contains(out, "password_file is not") {
		t.Errorf("status --user without --password-file: exit %d", code)
	}
	if code, out := run(vars, "status", "--user", "ops:secret"); code != exitConfig || strings.Contains(out, "secret") ||
		!strings.Contains(out, "the password is only read from a file") {
		t.Errorf("status --user NAME:PASSWORD: exit %d", code)
	}

	// The daemon's own file with a key only the daemon checks: status reads
	// what it needs and does not refuse.
	p := w.ConfigFile("m1")
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("[http]\nlisten = \"127.0.0.1:0\"\n")
	_ = f.Close()
	if code, out := run(nil, "status", "-c", p); code != exitNoStandby || !strings.Contains(out, leader.Name) {
		t.Errorf("status with http.listen = 127.0.0.1:0: exit %d", code)
	}
	// But the daemon still refuses it.
	if code, out := run(nil, "check-config", "-c", p); code != exitConfig || !strings.Contains(out, "http.listen") {
		t.Errorf("check-config with http.listen = 127.0.0.1:0: exit %d", code)
	}
}
