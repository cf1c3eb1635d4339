//go:build kube

package apifence_test

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
)

type auditUser struct {
	Username string              `json:"username"`
	Extra    map[string][]string `json:"extra"`
}

type auditEvent struct {
	Stage            string     `json:"stage"`
	Verb             string     `json:"verb"`
	User             auditUser  `json:"user"`
	ImpersonatedUser *auditUser `json:"impersonatedUser"`
	ObjectRef        *struct {
		Resource, Subresource, Name string
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received   time.Time `json:"requestReceivedTimestamp"`
	RequestURI string    `json:"requestURI"`
}

// judgeAudit reads both apiservers' audit logs and judges at the resource:
// every write by a managed component's user that was accepted carried the
// token the parameter held when it arrived (100 before the switch to 101
// began, 101 after it was confirmed, either while it ran), and no write
// sent with a managed user's own credential was accepted.
func judgeAudit(t *testing.T, p *plane, switchStart, switchDone time.Time) {
	managed := apifence.ManagedUsers()
	var accepted, refused, stale, direct, dryRuns int
	counts := map[string]int{}
	for i, path := range p.audit {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e auditEvent
			if json.Unmarshal(sc.Bytes(), &e) != nil || e.Stage != "ResponseComplete" || e.ResponseStatus == nil {
				continue
			}
			if !slices.Contains([]string{"create", "update", "patch", "delete"}, e.Verb) {
				continue
			}
			eff := e.User
			if e.ImpersonatedUser != nil {
				eff = *e.ImpersonatedUser
			}
			if !slices.Contains(managed, eff.Username) {
				continue
			}
			ok := e.ResponseStatus.Code < 300
			if !ok {
				if e.ResponseStatus.Code == 422 {
					refused++
				}
				continue
			}
			if strings.Contains(e.RequestURI, "dryRun=All") {
				dryRuns++ // the publisher's confirmation probes: admitted, never stored
				continue
			}
			accepted++
			if e.ImpersonatedUser == nil {
				direct++
				t.Errorf("apiserver %d accepted %s %v by %s with its own credential", i, e.Verb, e.ObjectRef, eff.Username)
				continue
			}
			tok := eff.Extra[gate.TokenExtra]
			counts[tokenString(tok)]++
			switch {
			case len(tok) != 1:
				stale++
				t.Errorf("apiserver %d accepted a write without one token: %+v", i, e)
			case tok[0] == "100" && e.Received.After(switchDone):
				stale++
				t.Errorf("apiserver %d accepted token 100 at %s, after 101 was confirmed at %s", i, e.Received, switchDone)
			case tok[0] == "101" && e.Received.Before(switchStart):
				stale++
				t.Errorf("apiserver %d accepted token 101 at %s before it was published", i, e.Received)
			case tok[0] != "100" && tok[0] != "101":
				stale++
				t.Errorf("apiserver %d accepted unknown token %v", i, tok)
			}
		}
		f.Close()
	}
	t.Logf("audit logs of both apiservers: managed users' writes accepted %d (by token: %v), refused by the policy (422) %d; "+
		"accepted with a stale or missing token: %d; accepted with their own credential: %d; dry-run probes admitted: %d",
		accepted, counts, refused, stale, direct, dryRuns)
	if accepted == 0 || refused == 0 {
		t.Errorf("the audit logs hold %d accepted and %d refused managed writes; want both", accepted, refused)
	}
}

func tokenString(t []string) string {
	if len(t) == 0 {
		return "none"
	}
	return t[0]
}
