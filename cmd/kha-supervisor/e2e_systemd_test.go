package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var securityScore = regexp.MustCompile(`Overall exposure level for kha-supervisor\.service: ([0-9.]+)`)

// TestSystemdIntegration runs the packaged unit under a real systemd (in
// nspawn containers, as TestEndToEnd does) and checks what an operator sees
// of it: the sandbox's score as systemd computes it for the loaded unit,
// STATUS= naming the leader on the standby, `systemctl reload` applying the
// log level and refusing lease.ttl by name without a restart or a handoff,
// and the journal's priorities (`journalctl -p warning` finds the refusal,
// not the info lines) without a second timestamp.
func TestSystemdIntegration(t *testing.T) {
	c := newE2ECluster(t, e2eFast)
	leader, standby, cs := c.waitStable(90 * time.Second)

	// 1. The sandbox as loaded, drop-ins included, scores under 3.0.
	out, _, err := leader.exec("systemd-analyze", "security", "--no-pager", e2eSupervisor)
	if err != nil {
		t.Fatal(err)
	}
	m := securityScore.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: no overall score:\n%s", out)
	}
	if score, _ := strconv.ParseFloat(m[1], 64); score >= 3.0 {
		t.Errorf("systemd-analyze security kha-supervisor.service = %.1f in the container, want under 3.0:\n%s", score, out)
	} else {
		t.Logf("systemd-analyze security kha-supervisor.service (loaded, in nspawn): %.1f", score)
	}

	// 2. STATUS= on the standby names the leader and its token.
	want := fmt.Sprintf("standby; leader %s, token %d", leader.name, cs.Token)
	waitFor(t, 20*time.Second, standby.name+" StatusText naming the leader", func() (bool, string) {
		got := standby.show(e2eSupervisor, "StatusText")
		return got == want, got
	})
	if st := leader.show(e2eSupervisor, "StatusText"); !strings.HasPrefix(st, fmt.Sprintf("active; token %d, lease valid ", cs.Token)) {
		t.Errorf("leader's StatusText = %q", st)
	}

	// 3. Reload on the leader: log.level applies, lease.ttl is refused by
	// name, same process, same token, nothing handed over.
	pid := leader.show(e2eSupervisor, "MainPID")
	p := c.profile
	p.LogLevel, p.TTL = "debug", p.TTL+2*time.Second
	eps := make([]string, 0, 3)
	for _, a := range leader.proxies.Addrs() {
		eps = append(eps, "http://"+a)
	}
	if err := leader.c.WriteFile(e2eConfig, p.config(leader.name, eps), 0o600); err != nil {
		t.Fatal(err)
	}
	leader.systemctl("reload", e2eSupervisor)
	waitFor(t, 20*time.Second, "the reload logged", func() (bool, string) {
		j := leader.journal(e2eSupervisor)
		return strings.Contains(j, "configuration reloaded"), ""
	})
	if got := leader.show(e2eSupervisor, "MainPID"); got != pid {
		t.Errorf("MainPID %s after reload, was %s: the daemon restarted", got, pid)
	}
	l2, _, cs2 := c.waitStable(30 * time.Second)
	if l2 != leader || cs2.Token != cs.Token {
		t.Errorf("after reload: leader %s token %d, was %s token %d", l2.name, cs2.Token, leader.name, cs.Token)
	}

	// 4. Priorities: the refusal is a warning, the summary is info.
	warn := leader.run("journalctl", "--no-pager", "-o", "cat", "-p", "warning", "-u", e2eSupervisor)
	if !strings.Contains(warn, "reload: lease.ttl changed but cannot change while running") {
		t.Errorf("journalctl -p warning lacks the refusal naming lease.ttl:\n%s", warn)
	}
	if strings.Contains(warn, "configuration reloaded") {
		t.Errorf("journalctl -p warning shows an info line:\n%s", warn)
	}
	all := leader.run("journalctl", "--no-pager", "-o", "cat", "-u", e2eSupervisor, "_PID="+pid)
	for line := range strings.Lines(all) {
		if strings.HasPrefix(line, "time=") || strings.HasPrefix(line, "<") {
			t.Errorf("journal line with its own timestamp or a raw prefix: %q", line)
			break
		}
	}
	if !strings.Contains(all, "applied=log.level refused=lease.ttl") {
		t.Errorf("the reload summary does not say log.level applied and lease.ttl refused:\n%s", all)
	}
}
