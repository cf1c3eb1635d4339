package scenario

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/kha-supervisor/kha-supervisor/lab"
)

// leaderURL is /leader on a master's own loopback (the configuration's
// default http.listen; the lab's configuration leaves it alone).
const leaderURL = "http://127.0.0.1:9731/leader"

// probePeriod is how often scenario 20 samples both masters.
const probePeriod = 50 * time.Millisecond

// leaderSample is one GET /leader on one master.
type leaderSample struct {
	Node       string
	Sent, Recv time.Time
	Code       int // 0: no HTTP answer (refused, timed out)
	Err        string
}

// leaderRound is one sample of every master, taken together.
type leaderRound []leaderSample

// leaderClient talks HTTP to node's loopback: its connections are opened
// inside the master's network namespace (the container's 127.0.0.1), so
// the probe needs nothing inside the container and costs no process per
// sample.
func (e *Env) leaderClient(node string) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return e.Lab.Topo.DialContext(ctx, node, network, addr)
		},
		MaxIdleConnsPerHost: 1,
	}
	return &http.Client{Transport: tr, Timeout: time.Second}
}

// probeLeader samples /leader on every master every probePeriod until ctx
// ends, and returns the rounds.
func (e *Env) probeLeader(ctx context.Context) []leaderRound {
	clients := map[string]*http.Client{}
	for _, n := range lab.MasterNames {
		clients[n] = e.leaderClient(n)
		defer clients[n].CloseIdleConnections()
	}
	var rounds []leaderRound
	tick := time.NewTicker(probePeriod)
	defer tick.Stop()
	for {
		round := make(leaderRound, len(lab.MasterNames))
		var wg sync.WaitGroup
		for i, n := range lab.MasterNames {
			wg.Add(1)
			go func() {
				defer wg.Done()
				round[i] = getLeader(ctx, clients[n], n)
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return rounds
		}
		rounds = append(rounds, round)
		select {
		case <-ctx.Done():
			return rounds
		case <-tick.C:
		}
	}
}

func getLeader(ctx context.Context, c *http.Client, node string) leaderSample {
	s := leaderSample{Node: node, Sent: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, leaderURL, nil)
	if err != nil {
		s.Err = err.Error()
		return s
	}
	resp, err := c.Do(req)
	s.Recv = time.Now()
	if err != nil {
		s.Err = err.Error()
		return s
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	s.Code = resp.StatusCode
	return s
}

// leaderVerdict is what the rounds show about one failover from Old to New.
type leaderVerdict struct {
	Rounds, Before, After int       // rounds in total, before the fault, after settling
	LastOld, FirstNew     time.Time // last 200 of the old leader, first 200 of the new (answer instants)
	Problems              []string
}

// judgeLeaderRounds checks the rounds of one failover: never two 200s in one
// round; before fault exactly one 200 per round, from old; after settled
// exactly one, from new; the old leader never answers 200 again once the
// new one has.
func judgeLeaderRounds(rounds []leaderRound, fault, settled time.Time, old, new string) leaderVerdict {
	v := leaderVerdict{Rounds: len(rounds)}
	bad := func(format string, a ...any) {
		if len(v.Problems) < 10 {
			v.Problems = append(v.Problems, fmt.Sprintf(format, a...))
		}
	}
	for _, round := range rounds {
		var ok []string
		var last time.Time
		first := round[0].Sent
		for _, s := range round {
			last = later(last, s.Recv)
			if s.Sent.Before(first) {
				first = s.Sent
			}
			if s.Code == http.StatusOK {
				ok = append(ok, s.Node)
				switch s.Node {
				case old:
					if !v.FirstNew.IsZero() {
						bad("%s answered 200 at %s, after %s had (at %s)", old, s.Recv.UTC().Format("15:04:05.000"), new, v.FirstNew.UTC().Format("15:04:05.000"))
					}
					v.LastOld = later(v.LastOld, s.Recv)
				case new:
					if v.FirstNew.IsZero() && !s.Recv.Before(fault) {
						v.FirstNew = s.Recv
					}
				}
			}
		}
		if len(ok) > 1 {
			bad("%v all answered 200 in the round at %s", ok, first.UTC().Format("15:04:05.000"))
		}
		switch {
		case last.Before(fault):
			v.Before++
			if len(ok) != 1 || ok[0] != old {
				bad("before the fault (round at %s): 200 from %v, want exactly %s (%s)", first.UTC().Format("15:04:05.000"), ok, old, describeRound(round))
			}
		case first.After(settled):
			v.After++
			if len(ok) != 1 || ok[0] != new {
				bad("after the failover (round at %s): 200 from %v, want exactly %s (%s)", first.UTC().Format("15:04:05.000"), ok, new, describeRound(round))
			}
		}
	}
	if v.Before == 0 || v.After == 0 {
		bad("too few rounds: %d before the fault, %d after the failover", v.Before, v.After)
	}
	if v.FirstNew.IsZero() {
		bad("%s never answered 200", new)
	}
	return v
}

func describeRound(round leaderRound) string {
	s := ""
	for i, x := range round {
		if i > 0 {
			s += ", "
		}
		if x.Code != 0 {
			s += fmt.Sprintf("%s %d", x.Node, x.Code)
		} else {
			s += fmt.Sprintf("%s no answer: %s", x.Node, x.Err)
		}
	}
	return s
}

func leaderEndpoint(ctx context.Context, r *Run) error {
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan []leaderRound, 1)
	go func() { done <- r.probeLeader(pctx) }()
	// A second of the steady state first.
	if err := Sleep(ctx, time.Second); err != nil {
		return err
	}
	fault, err := r.Fault("cut rack of "+r.Leader+" from etcd (probing /leader on both)", func() error {
		return r.cutFromEtcd(ctx, r.Leader, "")
	})
	if err != nil {
		return err
	}
	_, ferr := r.Failover(ctx, fault, r.Standby)
	settled := time.Now().Add(500 * time.Millisecond)
	if ferr == nil {
		ferr = Sleep(ctx, 1500*time.Millisecond)
	}
	stop()
	rounds := <-done
	if ferr != nil {
		return ferr
	}
	r.expectStoppedBeforeWin()
	v := judgeLeaderRounds(rounds, fault, settled, r.Leader, r.Standby)
	for _, p := range v.Problems {
		r.Failf("/leader: %s", p)
	}
	noAnswer := 0
	for _, round := range rounds {
		for _, s := range round {
			if s.Code == 0 {
				noAnswer++
			}
		}
	}
	r.Notef("/leader: %d rounds (%d before the fault, %d after the failover settled), %d requests without an HTTP answer (the fenced supervisor restarting)",
		v.Rounds, v.Before, v.After, noAnswer)
	if !v.LastOld.IsZero() {
		r.Metric("old_last_200", v.LastOld.Sub(fault))
		r.Mark(v.LastOld, r.Leader, "last /leader 200 on "+r.Leader)
	}
	if !v.FirstNew.IsZero() {
		r.Metric("new_first_200", v.FirstNew.Sub(fault))
		r.Mark(v.FirstNew, r.Standby, "first /leader 200 on "+r.Standby)
		if !v.LastOld.IsZero() {
			r.Metric("no_200", v.FirstNew.Sub(v.LastOld))
		}
		// A 200 promises the units run there: the old leader's units must
		// be gone by then.
		if oldLast := latest(r.lastBeats(r.Leader, fault)); !oldLast.IsZero() && !v.FirstNew.After(oldLast) {
			r.Failf("/leader: %s answered 200 at %s, before %s's units' last heartbeat at %s", r.Standby,
				v.FirstNew.UTC().Format("15:04:05.000"), r.Leader, oldLast.UTC().Format("15:04:05.000"))
		}
	}
	return r.Heal(ctx)
}
