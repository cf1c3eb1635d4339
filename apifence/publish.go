package apifence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// ProbeUser is who the confirmation's dry-run writes are sent as: the
// scheduler may create events (its RBAC role says so), so RBAC lets the
// probe through to admission, where the policy decides.
const ProbeUser = "system:kube-scheduler"

// Publisher moves the token into the parameter and confirms that every
// apiserver enforces it.
type Publisher struct {
	// Endpoints are the supervisor's credential, one config per apiserver
	// (Host differs). The first that answers takes the write.
	Endpoints []*rest.Config
	// Poll is the pause between confirmation attempts; 50 ms if zero.
	Poll time.Duration
	// Group is this supervisor's election group (config cluster). The
	// parameter records the first group that published (data.group); a
	// supervisor of another group never writes it: two groups would
	// otherwise take the token from each other, and a node configured into
	// the wrong group would fence out the real leader.
	Group string
	// Etcd, if set, names kha's etcd cluster (recorded in the parameter
	// beside Group) and its revision (lineage.go).
	Etcd EtcdFunc
}

// Published is what a successful Publish did.
type Published struct {
	Token    int64
	Previous int64 // the token the parameter held before
	Took     time.Duration
	Excused  []string // apiservers that could not store a write and were not waited for
}

// ErrOtherGroup means the parameter belongs to another election group.
var ErrOtherGroup = errors.New("the parameter belongs to another group")

// ErrNewerToken means the parameter already holds a later term's token:
// this node's term is over, whatever its lease says.
var ErrNewerToken = errors.New("the parameter holds a newer fencing token")

// Publish checks that the endpoints are every apiserver the cluster
// knows (CheckSet), writes token to the parameter (guarded by resourceVersion;
// refusing to replace a newer token), then waits until, on every endpoint,
// a dry-run write carrying token is admitted and one carrying the previous
// token is refused by the policy. ctx bounds the whole.
func (p *Publisher) Publish(ctx context.Context, token int64) (Published, error) {
	start := time.Now()
	if len(p.Endpoints) == 0 {
		return Published{}, errors.New("api fence: no apiserver endpoints")
	}
	if _, err := CheckSet(ctx, p.Endpoints); err != nil { // apiservers.go
		return Published{}, err
	}
	prev, err := p.write(ctx, token)
	if err != nil {
		return Published{}, err
	}
	stale := prev
	if stale == token {
		stale = 0 // re-publishing our own term: any other value must be refused
	}
	excused, err := p.confirmAll(ctx, token, stale)
	if err != nil {
		return Published{}, err
	}
	return Published{Token: token, Previous: prev, Took: time.Since(start), Excused: excused}, nil
}

// confirmAll confirms on every endpoint at once and returns the ones it
// excused: an apiserver that cannot store a write (unreachable, or its own
// etcd check failing) in two attempts in a row. Such an apiserver is the
// cut rack's in a rack cut; waiting for it would keep every promotion from
// succeeding while the cut lasts. One that answers with its etcd healthy is
// never excused: its cache could still admit the old term's writes.
func (p *Publisher) confirmAll(ctx context.Context, token, stale int64) ([]string, error) {
	type outcome struct {
		host    string
		excused bool
		err     error
	}
	ch := make(chan outcome, len(p.Endpoints))
	for _, ep := range p.Endpoints {
		go func() {
			excused, err := p.confirm(ctx, ep, token, stale)
			ch <- outcome{ep.Host, excused, err}
		}()
	}
	var excused []string
	var errs []error
	for range p.Endpoints {
		o := <-ch
		switch {
		case o.err != nil:
			errs = append(errs, fmt.Errorf("api fence: confirm on %s: %w", o.host, o.err))
		case o.excused:
			excused = append(excused, o.host)
		}
	}
	return excused, errors.Join(errs...)
}

// write returns the token the parameter held before.
func (p *Publisher) write(ctx context.Context, token int64) (int64, error) {
	var st *EtcdState
	if p.Etcd != nil {
		s, err := p.Etcd(ctx)
		if err != nil {
			return 0, fmt.Errorf("api fence: read kha's etcd cluster ID and revision: %w", err)
		}
		st = &s
	}
	var last error
	for ctx.Err() == nil {
		for _, ep := range p.Endpoints {
			prev, err := writeOn(ctx, ep, token, p.Group, st)
			if err == nil || errors.Is(err, ErrNewerToken) || errors.Is(err, ErrOtherGroup) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
				return prev, err
			}
			last = err // unreachable, conflict: next endpoint, then again
		}
		if sleep(ctx, p.poll()) != nil {
			break
		}
	}
	return 0, fmt.Errorf("api fence: write token %d: %w", token, errors.Join(ctx.Err(), last))
}

// paramPath is the parameter ConfigMap's REST path.
const paramPath = "/api/v1/namespaces/" + Namespace + "/configmaps/" + ParamName

func getParam(ctx context.Context, api *kubeapi.Client) (*kubeapi.ConfigMap, error) {
	cm := &kubeapi.ConfigMap{}
	return cm, api.Do(ctx, "GET", paramPath, nil, nil, cm)
}

func writeOn(ctx context.Context, ep *rest.Config, token int64, group string, st *EtcdState) (int64, error) {
	api, err := kubeapi.New(ep)
	if err != nil {
		return 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cm, err := getParam(rctx, api)
	if apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("api fence: parameter %s/%s is missing (install `kha-supervisor api-fence manifests`): %w", Namespace, ParamName, err)
	}
	if err != nil {
		return 0, err
	}
	prev, err := HeldToken(cm)
	if err != nil {
		return 0, err
	}
	if g := cm.Data["group"]; g != "" && group != "" && g != group {
		return prev, fmt.Errorf("api fence: %w: %s/%s data.group is %q, this node's cluster is %q; not starting units", ErrOtherGroup, Namespace, ParamName, g, group)
	}
	if err := checkLineage(cm, prev, token, st); err != nil {
		return prev, err
	}
	switch {
	case prev > token:
		return prev, fmt.Errorf("api fence: %w (%d > ours %d); not starting units", ErrNewerToken, prev, token)
	case prev == token:
		return prev, nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data["token"] = strconv.FormatInt(token, 10)
	if group != "" {
		cm.Data["group"] = group
	}
	record(cm, st)
	cm.APIVersion, cm.Kind = "v1", "ConfigMap"
	// Update carries the Get's resourceVersion: a concurrent writer makes
	// this a conflict, and the loop reads again.
	if err := api.Do(rctx, "PUT", paramPath, nil, cm, nil); err != nil {
		return prev, err
	}
	return prev, nil
}

// HeldToken parses the parameter's data.token; missing is 0.
func HeldToken(cm *kubeapi.ConfigMap) (int64, error) {
	s, ok := cm.Data["token"]
	if !ok || s == "" {
		return 0, nil
	}
	t, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("api fence: parameter %s/%s data.token %q is not a number", Namespace, ParamName, s)
	}
	return t, nil
}

// Read returns the token the parameter holds, from the first endpoint that
// answers.
func (p *Publisher) Read(ctx context.Context) (int64, error) {
	var errs []error
	for _, ep := range p.Endpoints {
		api, err := kubeapi.New(ep)
		if err != nil {
			return 0, err
		}
		cm, err := getParam(ctx, api)
		if err == nil {
			return HeldToken(cm)
		}
		errs = append(errs, err)
	}
	return 0, errors.Join(errs...)
}

// confirm polls one apiserver until its admission admits the new token and
// refuses the stale one, or until two attempts in a row found it unable to
// take a managed write (excused): its etcd check fails or it does not
// answer its readiness check, or it answers every managed write with the
// failure to call the token webhook (its node's supervisor is stopped:
// failurePolicy Fail refuses them all). Each attempt sends both probes and
// the readiness check at once, so that an apiserver that drops every packet
// is excused after two readiness timeouts (about 2 s), not after two rounds
// of three timeouts one after the other.
//
// Excusing an apiserver no longer rests on its cache: the webhook, which
// every apiserver calls for every managed write, judges by a quorum read of
// the parameter (docs/architecture.md, "The webhook as the authority").
func (p *Publisher) confirm(ctx context.Context, ep *rest.Config, token, stale int64) (excused bool, err error) {
	var last string
	unable := 0
	for {
		r := attempt(ctx, ep, token, stale)
		if r.okNew && !r.okOld && IsPolicyDenial(r.oldErr) {
			return false, nil
		}
		if webhookRefusesAll(r) {
			// Safe at the first sight, unlike a silence: while the
			// webhook cannot be called nothing managed is stored there,
			// and once it can, it judges by a quorum read.
			return true, nil
		}
		if r.down {
			unable++
		} else {
			unable = 0
		}
		if unable >= 2 {
			return true, nil
		}
		last = fmt.Sprintf("token %d: %s; token %d: %s", token, answer(r.okNew, r.newErr), stale, answer(r.okOld, r.oldErr))
		if err := sleep(ctx, p.poll()); err != nil {
			return false, fmt.Errorf("%w (last: %s)", err, last)
		}
	}
}

// attemptResult is one confirmation attempt on one apiserver.
type attemptResult struct {
	okNew, okOld   bool
	newErr, oldErr error
	down           bool // etcdDown's verdict
}

// attempt sends the probe with the new token, the probe with the stale one
// and the readiness check at once. A readiness check that finds the
// apiserver unable to store a write ends the probes: they could not be
// answered sooner than it.
func attempt(ctx context.Context, ep *rest.Config, token, stale int64) attemptResult {
	var r attemptResult
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { r.okNew, r.newErr = probe(pctx, ep, token) })
	wg.Go(func() { r.okOld, r.oldErr = probe(pctx, ep, stale) })
	if r.down = etcdDown(ctx, ep); r.down {
		cancel()
	}
	wg.Wait()
	return r
}

// webhookRefusesAll: the apiserver admitted neither probe, and refused at
// least one because it could not call the token webhook (the other by the
// policy, which runs first, or the same way). Its node's supervisor is
// stopped or hangs: with failurePolicy Fail it refuses every managed write
// until the webhook answers again, and then the webhook judges by a quorum
// read, whatever that apiserver's cache holds.
func webhookRefusesAll(r attemptResult) bool {
	refused := func(ok bool, err error) bool { return !ok && (IsPolicyDenial(err) || webhookUnreachable(err)) }
	return refused(r.okNew, r.newErr) && refused(r.okOld, r.oldErr) && (webhookUnreachable(r.newErr) || webhookUnreachable(r.oldErr))
}

// webhookUnreachable reports whether err is the apiserver's failure to call
// the token webhook: with failurePolicy Fail it refuses every managed write
// then, whatever the token.
func webhookUnreachable(err error) bool {
	return err != nil && apierrors.IsInternalError(err) && strings.Contains(err.Error(), `failed calling webhook "`+WebhookName+`"`)
}

// answered reports whether the apiserver answered (admitted, or refused
// with a status), as opposed to a request that got no answer.
func answered(err error) bool {
	var st apierrors.APIStatus
	return err == nil || errors.As(err, &st)
}

// etcdDown reports whether the apiserver cannot store a write now: it does
// not answer its readiness check, or answers that its etcd check fails.
// Any other answer, not ready for another reason included, is "up": an
// apiserver whose caches are still syncing can still store a write.
func etcdDown(ctx context.Context, ep *rest.Config) bool {
	hc, err := rest.HTTPClientFor(ep)
	if err != nil {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, strings.TrimSuffix(ep.Host, "/")+"/readyz?verbose", nil)
	if err != nil {
		return false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return ctx.Err() == nil // no answer (and not because we gave up)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode != http.StatusOK && strings.Contains(string(body), "[-]etcd ")
}

func answer(ok bool, err error) string {
	switch {
	case ok:
		return "admitted"
	case err == nil:
		return "not sent"
	}
	return err.Error()
}

// probeTimeout bounds one confirmation request: an apiserver that does not
// answer within it counts as unreachable for that attempt.
const probeTimeout = 2 * time.Second

// readyTimeout bounds one readiness check: an apiserver that does not
// answer /readyz within it counts as unable to store a write for that
// attempt. /readyz is answered without etcd or admission; a second is
// ample on a loaded machine.
const readyTimeout = time.Second

// probe sends a dry-run event create as ProbeUser with the token extra and
// reports whether it was admitted.
func probe(ctx context.Context, ep *rest.Config, token int64) (bool, error) {
	c := rest.CopyConfig(ep)
	c.Impersonate = rest.ImpersonationConfig{UserName: ProbeUser, Extra: map[string][]string{gate.TokenExtra: {strconv.FormatInt(token, 10)}}}
	api, err := kubeapi.New(c)
	if err != nil {
		return false, err
	}
	rctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	now := metav1.NewTime(time.Now())
	ev := &kubeapi.Event{
		TypeMeta:       metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "kha-fence-probe-", Namespace: Namespace},
		InvolvedObject: kubeapi.ObjectReference{Kind: "ConfigMap", Namespace: Namespace, Name: ParamName, APIVersion: "v1"},
		Reason:         "FencingTokenProbe", Message: "dry run: kha-supervisor confirms the fencing token", Type: "Normal",
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	ev.Source.Component = "kha-supervisor"
	err = api.Do(rctx, "POST", "/api/v1/namespaces/"+Namespace+"/events", url.Values{"dryRun": {metav1.DryRunAll}}, ev, nil)
	return err == nil, err
}

// IsPolicyDenial reports whether err is the token policy's refusal (or the
// webhook's: its name contains PolicyName, and it answers 422 Invalid too).
func IsPolicyDenial(err error) bool {
	return err != nil && apierrors.IsInvalid(err) && strings.Contains(err.Error(), PolicyName)
}

func (p *Publisher) poll() time.Duration {
	if p.Poll > 0 {
		return p.Poll
	}
	return 50 * time.Millisecond
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
