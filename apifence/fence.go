package apifence

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence/failover"
	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
	"github.com/kha-supervisor/kha-supervisor/fencing"
	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// Modes (config api_fence.mode).
const (
	ModeGate  = "gate"
	ModeToken = "token"
)

// GateSpec is one unit's gate address.
type GateSpec struct {
	Unit string
	Addr string // loopback host:port
}

// Options build a Fence.
type Options struct {
	Mode string // ModeGate or ModeToken
	// Upstreams are the supervisor's credential, one per apiserver; the
	// gates forward to the first that gives a connection (failover), the
	// token is confirmed on all.
	Upstreams      []*rest.Config
	Gates          []GateSpec
	StateDir       string         // the local CA (localca)
	ClientCAs      *x509.CertPool // the cluster CA, for the components' client certificates
	ConfirmTimeout time.Duration  // bounds Publish
	Group          string         // the election group (config cluster): Publisher.Group
	Etcd           EtcdFunc       // kha's etcd cluster ID and revision: Publisher.Etcd
	// Webhook, if set, is the loopback host:port of the token webhook
	// (clusters older than 1.30; gate or token mode), served on every node whatever
	// its state: it judges by the parameter, not by this node's term.
	Webhook string
	// Peers, if set, admits to each gate only the processes of its unit
	// (gate/peer.go): the daemon sets gate.ProcPeers; nil checks nothing.
	Peers gate.Peers
	// SelfCheckEvery is the leader's self-check period (selfcheck.go);
	// DefaultSelfCheckEvery if zero.
	SelfCheckEvery time.Duration
	Log            *slog.Logger
}

// Fence is the supervisor's side of the fence at the API server: the
// gates, and in token mode the publisher. It implements the supervisor's
// APIFence (Publish, Cut).
type Fence struct {
	mode    string
	gates   []*gate.Gate
	webhook *Webhook
	pub     *Publisher // token mode: writes and confirms the token
	// param, in gate mode, writes the term's token into a parameter that
	// exists, without confirming it (followParam).
	param   *Publisher
	timeout time.Duration
	log     *slog.Logger

	term      atomic.Pointer[gate.TermFunc]
	published atomic.Int64 // the token the gates may forward with; 0 none
	cut       atomic.Int64 // the largest token a Cut ended: never published again
	held      atomic.Int64 // the token the apiservers hold, as last written or read
	handover  atomic.Pointer[Handover]
	selfEvery time.Duration
	watch     watch
	stranger  atomic.Pointer[func(unit string, p gate.Peer)]
	strangers sync.Map // "unit/pid" already told: a client retrying every second is one event

	closeOnce sync.Once
	stop      context.CancelFunc
}

// New opens the local CA and binds every gate; Serve starts them. The
// gates refuse everything until SetTerm is called and a term publishes.
func New(o Options) (*Fence, error) {
	if o.Mode != ModeGate && o.Mode != ModeToken {
		return nil, fmt.Errorf("api fence: mode %q is neither %q nor %q", o.Mode, ModeGate, ModeToken)
	}
	if len(o.Upstreams) == 0 {
		return nil, errors.New("api fence: no apiserver")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	ca, err := localca.Open(o.StateDir)
	if err != nil {
		return nil, err
	}
	f := &Fence{mode: o.Mode, timeout: o.ConfirmTimeout, log: o.Log, selfEvery: o.SelfCheckEvery}
	if o.Mode == ModeToken {
		f.pub = &Publisher{Endpoints: o.Upstreams, Group: o.Group, Etcd: o.Etcd}
	} else {
		f.param = &Publisher{Endpoints: o.Upstreams, Group: o.Group, Etcd: o.Etcd}
	}
	closed := gate.TermFunc(func() gate.Term { return gate.Term{Reason: "the supervisor is starting"} })
	f.term.Store(&closed)
	for _, spec := range o.Gates {
		serving, err := ca.Serving(spec.Unit)
		if err == nil {
			var g *gate.Gate
			g, err = gate.Listen(gate.Config{Unit: spec.Unit, Listen: spec.Addr, Serving: serving, ClientCAs: o.ClientCAs,
				Upstreams: o.Upstreams, Term: f.gateTerm, Peers: o.Peers, Log: o.Log,
				OnStranger: func(p gate.Peer, _ error) { f.tellStranger(spec.Unit, p) }})
			f.gates = append(f.gates, g)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("api fence: gate for %s: %w", spec.Unit, err)
		}
	}
	if o.Webhook != "" {
		if f.webhook, err = newWebhook(ca, o); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

func newWebhook(ca *localca.CA, o Options) (*Webhook, error) {
	serving, err := ca.Serving("webhook")
	if err != nil {
		return nil, fmt.Errorf("api fence webhook: %w", err)
	}
	set, err := failover.New(o.Upstreams, failover.Options{})
	if err != nil {
		return nil, fmt.Errorf("api fence webhook: %w", err)
	}
	src := ParamSource{API: kubeapi.FromHTTP(set.Client(), set.First().String())}
	return ListenWebhook(o.Webhook, serving, src, o.Log)
}

// SetTerm gives the gates the supervisor's term: a request may leave only
// while the term may act (fencing.Term.MayAct, asked at its arrival and
// again at its departure), with the term's token.
func (f *Fence) SetTerm(fn func() fencing.Term) {
	g := gate.TermFunc(func() gate.Term { return gateTerm(fn(), time.Now()) })
	f.term.Store(&g)
}

// gateTerm is the gates' view of the term at now: open with the token
// while the term may act, closed with the reason otherwise.
func gateTerm(t fencing.Term, now time.Time) gate.Term {
	if why := t.Closed(now); why != "" {
		return gate.Term{Reason: why}
	}
	return gate.Term{Open: true, Token: t.Token}
}

// OnStranger sets who hears of a process a gate refused (the supervisor's
// stray-process record).
func (f *Fence) OnStranger(fn func(unit string, p gate.Peer)) { f.stranger.Store(&fn) }

func (f *Fence) tellStranger(unit string, p gate.Peer) {
	fn := f.stranger.Load()
	if fn == nil {
		return
	}
	if _, told := f.strangers.LoadOrStore(fmt.Sprintf("%s/%d/%s", unit, p.PID, p.Cgroup), true); told {
		return
	}
	(*fn)(unit, p)
}

// gateTerm is the supervisor's term, closed until this term's token is
// published (in gate mode: until the promotion got past the barrier).
func (f *Fence) gateTerm() gate.Term {
	t := (*f.term.Load())()
	if t.Open && (f.published.Load() != t.Token || t.Token <= f.cut.Load()) {
		return gate.Term{Reason: fmt.Sprintf("the fencing token %d is not published yet", t.Token)}
	}
	return t
}

// Serve starts the gates and, in token mode, a reader that keeps the held
// token fresh for status on a standby.
func (f *Fence) Serve() {
	ctx, cancel := context.WithCancel(context.Background())
	f.stop = cancel
	for _, g := range f.gates {
		go func() {
			if err := g.Serve(); err != nil {
				f.log.Error("api gate stopped", "addr", g.Addr(), "err", err)
			}
		}()
	}
	if f.webhook != nil {
		go func() {
			if err := f.webhook.Serve(); err != nil {
				f.log.Error("api fence webhook stopped", "addr", f.webhook.Addr(), "err", err)
			}
		}()
	}
	if f.pub != nil {
		go f.refreshHeld(ctx)
		go f.selfCheck(ctx)
	}
}

func (f *Fence) refreshHeld(ctx context.Context) {
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if tok, err := f.pub.Read(rctx); err == nil {
			f.held.Store(tok)
		}
		f.checkSet(rctx)
		cancel()
		if sleep(ctx, 10*time.Second) != nil {
			return
		}
	}
}

// Publish is called at promotion after the barrier, before the units
// start. In token mode it writes and confirms the token (bounded by the
// confirm timeout); in gate mode it opens the gates for this term and, in
// the background, writes the token into the parameter if one exists
// (followParam).
func (f *Fence) Publish(ctx context.Context, token int64) error {
	if token <= f.cut.Load() {
		return fmt.Errorf("api fence: term %d was already cut", token)
	}
	if f.pub != nil {
		if f.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, f.timeout)
			defer cancel()
		}
		p, err := f.pub.Publish(ctx, token)
		if err != nil {
			return err
		}
		f.held.Store(token)
		f.handover.Store(&Handover{Token: token, Previous: p.Previous, At: time.Now(), Took: p.Took})
		if len(p.Excused) > 0 {
			f.log.Warn("fencing token confirmed on every apiserver that can store a write; not on these (unreachable, or their etcd check fails)",
				"token", token, "excused", p.Excused)
		}
		f.log.Info("fencing token published and confirmed", "token", token, "previous", p.Previous,
			"apiservers", len(f.pub.Endpoints), "excused", len(p.Excused), "took", p.Took.Round(time.Millisecond))
	}
	f.published.Store(token)
	if token <= f.cut.Load() { // a Cut ran while this Publish did
		f.published.Store(0)
		return fmt.Errorf("api fence: term %d was cut while publishing", token)
	}
	if f.param != nil {
		go f.followParam(context.WithoutCancel(ctx), token)
	}
	return nil
}

// followTimeout bounds followParam when no confirm timeout is set.
const followTimeout = 10 * time.Second

// followParam is gate mode's part in a cluster whose token policy is
// installed: the rollout (docs/operations.md, "Fencing at the API server")
// applies the policy while every master still runs in gate mode, and a
// gate-mode leader promoted then would find the parameter holding its
// predecessor's token and every write of its units refused. So a gate-mode
// promotion writes its token into the parameter when the parameter exists,
// with the same guards as token mode (never back to an older token, never
// another group's parameter), but neither confirms it nor waits for it:
// gate mode promises nothing at the apiservers, and its units must not
// start later for it. A missing parameter is the normal gate-mode cluster;
// any other failure is a warning, since an enforcing policy then refuses
// this term's writes.
func (f *Fence) followParam(ctx context.Context, token int64) {
	timeout := f.timeout
	if timeout <= 0 {
		timeout = followTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if token <= f.cut.Load() {
		return // the term ended before its token was written: leave it
	}
	prev, err := f.param.write(ctx, token)
	switch {
	case apierrors.IsNotFound(err):
		f.log.Debug("gate mode: no fencing-token parameter in the cluster, nothing to follow", "token", token)
	case err != nil:
		f.log.Warn("gate mode: could not write this term's fencing token into the parameter; if its token policy enforces, the apiservers refuse this term's writes (gate mode starts the units all the same)",
			"token", token, "err", err)
	default:
		f.held.Store(token)
		f.log.Info("gate mode: fencing token written into the parameter (not confirmed)", "token", token, "previous", prev)
	}
}

// Cut closes the gates for this term and ends every connection at once.
// The term's token (the published one, or the supervisor's if a Publish is
// still under way) can never open the gates again: a Publish that returns
// after the Cut does not reopen them.
func (f *Fence) Cut() {
	cut := max(f.published.Load(), (*f.term.Load())().Token)
	for {
		old := f.cut.Load()
		if cut <= old || f.cut.CompareAndSwap(old, cut) {
			break
		}
	}
	f.published.Store(0)
	f.setUnfenced(nil, 0) // a standby vouches for nothing, from now on
	n := 0
	for _, g := range f.gates {
		n += g.Cut()
	}
	if n > 0 {
		f.log.Warn("api gates cut", "connections", n)
	}
}

// Close stops the gates.
func (f *Fence) Close() {
	f.closeOnce.Do(func() {
		if f.stop != nil {
			f.stop()
		}
		for _, g := range f.gates {
			_ = g.Close()
		}
		if f.webhook != nil {
			_ = f.webhook.Close()
		}
	})
}

// Handover is a Publish that wrote and confirmed a token (token mode).
type Handover struct {
	Token, Previous int64
	At              time.Time // confirmed on every apiserver
	Took            time.Duration
}

// Status is what the supervisor's status shows.
type Status struct {
	Mode     string
	Token    int64             // held by the apiservers (token mode), as last written or read
	Gates    map[string]string // unit -> address
	Handover *Handover         // the last one this node made
	Down     []string          // apiservers some gate skips after a failed connection
	// Webhook is the token webhook's address and decisions, when it runs.
	Webhook *WebhookStatus
	// Refused counts, per unit, the connections its gate refused because
	// the process was not the unit's.
	Refused map[string]int64
	// Unfenced are the apiservers that admitted a stale token at the
	// leader's last self-check; Unlisted those the cluster knows and
	// api_fence.apiservers lacks (selfcheck.go).
	Unfenced, Unlisted []string
	// WebhookOff is what is wrong with the token webhook's registration
	// at the leader's last self-check ("" in force or not checked).
	WebhookOff string
}

// WebhookStatus is the webhook part of Status.
type WebhookStatus struct {
	Addr string
	WebhookCounts
}

// Status reports the mode, the held token and the gates.
func (f *Fence) Status() Status {
	st := Status{Mode: f.mode, Token: f.held.Load(), Gates: map[string]string{}, Refused: map[string]int64{}}
	down := map[string]bool{}
	for _, g := range f.gates {
		st.Gates[g.Unit()] = g.Addr()
		st.Refused[g.Unit()] = g.Refused()
		_, d := g.Upstreams()
		for _, h := range d {
			if !down[h] {
				down[h] = true
				st.Down = append(st.Down, h)
			}
		}
	}
	st.Handover = f.handover.Load()
	st.Unfenced, st.Unlisted, st.WebhookOff = f.watch.get()
	if f.webhook != nil {
		st.Webhook = &WebhookStatus{Addr: f.webhook.Addr(), WebhookCounts: f.webhook.Counts()}
	}
	return st
}
