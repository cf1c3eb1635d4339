package audit

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// gated renders a write forwarded by an API gate: the supervisor's
// credential impersonating user with the token extra (none if token is
// ""), as kube-apiserver v1.37 audits it.
func gated(user, ip, token, uri string, code int, msg string, at time.Duration) string {
	extra := ""
	if token != "" {
		extra = fmt.Sprintf(`,"extra":{"kha.io/fencing-token":[%q]}`, token)
	}
	ts := t0.Add(at).Format(time.RFC3339Nano)
	return fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"x","stage":"ResponseComplete","requestURI":%q,"verb":"create","user":{"username":"kha-supervisor","groups":["system:authenticated"]},"impersonatedUser":{"username":%q,"groups":["system:authenticated"]%s},"sourceIPs":[%q],"objectRef":{"resource":"pods","subresource":"binding","namespace":"probe","name":"p","apiVersion":"v1"},"responseStatus":{"metadata":{},"message":%q,"code":%d},"requestReceivedTimestamp":%q,"stageTimestamp":%q}`,
		uri, user, extra, ip, msg, code, ts, ts)
}

const denied = `pods "p" is forbidden: ValidatingAdmissionPolicy 'kha-fencing-token' with binding 'kha-fencing-token' denied request: kha-supervisor: write refused`

// A token failover: m1 writes with 100, m2 publishes 101 (dry runs), then
// writes with 101; m1's later writes with 100 are refused. Then every kind
// of stale write that must be reported: 100 accepted after 101 wrote, no
// token, the scheduler's own certificate.
func TestFenceCountsStaleWritesAccepted(t *testing.T) {
	b := "/api/v1/namespaces/probe/pods/p/binding"
	ok := []string{
		gated(sched, ip1, "100", b, 201, "", 0),
		gated(sched, ip1, "100", b, 201, "", time.Second),
		gated(sched, ip2, "101", b+"?dryRun=All", 201, "", 5*time.Second),
		gated(sched, ip2, "101", b, 201, "", 6*time.Second),
		gated(sched, ip1, "100", b, 422, denied, 7*time.Second),
		gated(rsc, ip2, "101", b, 201, "", 8*time.Second),
		line("ResponseComplete", "admin", ip1, "create", "pods", "", "x", 201, 8*time.Second),
	}
	rep := Fence(parse(t, "m1", ok...), Options{})
	if len(rep.Stale) != 0 || rep.Accepted != 4 || rep.Refused != 1 || rep.DryRuns != 1 || rep.ByToken["100"] != 2 || rep.ByToken["101"] != 2 {
		t.Fatalf("clean token failover: %v %v", rep, rep.Stale)
	}
	bad := append(ok,
		gated(sched, ip1, "100", b, 201, "", 9*time.Second),
		gated(sched, ip1, "", b, 201, "", 10*time.Second),
		line("ResponseComplete", sched, ip2, "create", "pods", "binding", "p", 201, 11*time.Second),
	)
	rep = Fence(parse(t, "m1", bad...), Options{})
	var whys []string
	for _, s := range rep.Stale {
		whys = append(whys, s.Why)
	}
	want := []string{"token 100 accepted after a write of token 101", "without one fencing token", "own credential"}
	if len(whys) != len(want) {
		t.Fatalf("stale writes %q, want %d", whys, len(want))
	}
	for i, w := range want {
		if !strings.Contains(whys[i], w) {
			t.Errorf("stale write %d: %q, want %q", i, whys[i], w)
		}
	}
	a, r := Since(parse(t, "m1", bad...), Options{Masters: masters}, "m1", t0.Add(7*time.Second))
	if a != 2 || r != 1 {
		t.Errorf("m1 since 7 s: accepted %d refused %d, want 2 and 1", a, r)
	}
}
