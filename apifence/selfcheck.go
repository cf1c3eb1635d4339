package apifence

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// The fence watches itself. An admission policy cannot guard its own
// objects (ValidatingAdmissionPolicy objects are exempt from policies), so
// deleting the policy's binding, or setting it to Audit, would silently
// disable the fence until the next promotion. The leader therefore sends,
// every SelfCheckEvery, the confirmation's stale probe (a dry-run write
// carrying token 0) to every listed apiserver: each must refuse it by the
// policy. One that admits it is unfenced: an ERROR, status, /healthz and
// kha_api_fence_unfenced say so until it refuses again. Every node also
// re-checks the apiserver set (apiservers.go) with its token read.

// DefaultSelfCheckEvery is how often the leader re-checks: one dry run per
// apiserver, negligible next to the components' traffic; an alert a few
// seconds late costs nothing the fence has not already lost. Not a
// configuration key: nothing is gained by checking less often.
const DefaultSelfCheckEvery = 5 * time.Second

// selfCheckLogEvery repeats the ERROR while the fence stays off.
const selfCheckLogEvery = time.Minute

// watch is the self-check's and the set check's last findings.
type watch struct {
	mu       sync.Mutex
	unfenced []string // apiservers that admitted a stale token at the last check
	unlisted []string // apiservers the cluster knows and api_fence.apiservers lacks
	webhook  string   // what is wrong with the token webhook's registration (webhookcheck.go)
	// when each finding's ERROR was last logged (repeated every
	// selfCheckLogEvery while it lasts)
	logged, whLogged time.Time
}

// due reports whether a finding's ERROR is to be logged now: it is a
// problem and it changed, or it was last logged selfCheckLogEvery ago. It
// records the time in *logged then. The caller holds w.mu.
func due(problem, changed bool, logged *time.Time) bool {
	if !problem || (!changed && time.Since(*logged) < selfCheckLogEvery) {
		return false
	}
	*logged = time.Now()
	return true
}

func (w *watch) get() (unfenced, unlisted []string, webhook string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.unfenced), slices.Clone(w.unlisted), w.webhook
}

// selfCheck runs until ctx ends.
func (f *Fence) selfCheck(ctx context.Context) {
	every := f.selfEvery
	if every <= 0 {
		every = DefaultSelfCheckEvery
	}
	for {
		if tok := f.published.Load(); tok != 0 {
			f.checkStale(ctx, tok)
			f.checkWebhook(ctx)
		} else {
			f.setUnfenced(nil, 0) // not the leader: nothing to vouch for
			f.setWebhook("")
		}
		if sleep(ctx, every) != nil {
			return
		}
	}
}

// checkStale probes every endpoint at once with token 0.
func (f *Fence) checkStale(ctx context.Context, token int64) {
	type result struct {
		host     string
		admitted bool
	}
	ch := make(chan result, len(f.pub.Endpoints))
	for _, ep := range f.pub.Endpoints {
		go func() {
			ok, err := probe(ctx, ep, 0)
			// Only an admission counts: a refusal other than the
			// policy's (unreachable, 429, the webhook unreachable) says
			// nothing either way, and the gates report unreachable ones.
			ch <- result{ep.Host, ok && err == nil}
		}()
	}
	var bad []string
	for range f.pub.Endpoints {
		if r := <-ch; r.admitted {
			bad = append(bad, r.host)
		}
	}
	slices.Sort(bad)
	f.setUnfenced(bad, token)
}

func (f *Fence) setUnfenced(bad []string, token int64) {
	w := &f.watch
	w.mu.Lock()
	if token != 0 && f.published.Load() != token {
		// A check of a term cut while it ran: what it found no longer
		// concerns this node (Cut cleared the finding under this lock).
		w.mu.Unlock()
		return
	}
	changed := !slices.Equal(bad, w.unfenced)
	w.unfenced = bad
	repeat := due(len(bad) > 0, changed, &w.logged)
	w.mu.Unlock()
	switch {
	case repeat:
		// The causes and the remedy are in docs/troubleshooting.md (one
		// literal message, so that internal/logcatalog finds it).
		f.log.Error("api fence is OFF on these apiservers: a dry-run write with a stale fencing token was admitted",
			"unfenced", bad, "token", token)
	case changed && token != 0:
		f.log.Info("api fence: every listed apiserver refuses a stale token again", "token", token)
	}
}

// checkWebhook reads the token webhook's registration from the first
// apiserver that answers (webhookcheck.go); an unknown answer keeps the
// last finding.
func (f *Fence) checkWebhook(ctx context.Context) {
	for _, ep := range f.pub.Endpoints {
		api, err := kubeapi.New(ep)
		if err != nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		problem, err := WebhookProblem(rctx, api)
		cancel()
		if err == nil {
			f.setWebhook(problem)
			return
		}
	}
}

func (f *Fence) setWebhook(problem string) {
	w := &f.watch
	w.mu.Lock()
	changed := problem != w.webhook
	was := w.webhook
	w.webhook = problem
	repeat := due(problem != "", changed, &w.whLogged)
	w.mu.Unlock()
	switch {
	case repeat:
		f.log.Error("api fence: the token webhook is not in force: an apiserver whose cache of the parameter is behind admits a stale token",
			"problem", problem)
	case changed && was != "":
		f.log.Info("api fence: the token webhook's registration is in place again")
	}
}

// checkSet re-checks the apiserver set for status (every node).
func (f *Fence) checkSet(ctx context.Context) {
	unlisted, err := CheckSet(ctx, f.pub.Endpoints)
	if err != nil && !errors.Is(err, ErrUnlisted) {
		return // unknown: keep the last finding
	}
	w := &f.watch
	w.mu.Lock()
	changed := !slices.Equal(unlisted, w.unlisted)
	w.unlisted = unlisted
	w.mu.Unlock()
	if changed && len(unlisted) > 0 {
		f.log.Error("api fence: the cluster has apiservers api_fence.apiservers does not list; promotions fail until they are added", "err", err)
	}
}

// AlarmText is what /healthz and status add when the fence is off
// somewhere, the token webhook is not in force (webhook: the problem) or
// the apiserver list is incomplete; empty when none.
func AlarmText(unfenced, unlisted []string, webhook string) string {
	var s string
	if len(unfenced) > 0 {
		s += "; FENCE OFF: a stale token was admitted by " + strings.Join(unfenced, ", ") + " (re-apply `kha-supervisor api-fence manifests`)"
	}
	if webhook != "" {
		s += "; WEBHOOK OFF: " + webhook + " (re-apply `kha-supervisor api-fence manifests` with every node's --ca-bundle)"
	}
	if len(unlisted) > 0 {
		s += "; apiservers not in api_fence.apiservers (promotions fail): " + strings.Join(unlisted, ", ")
	}
	return s
}
