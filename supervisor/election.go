package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kha-supervisor/kha-supervisor/group"
	"github.com/kha-supervisor/kha-supervisor/supervisor/runstate"
)

// electionKey is the group's election key, in the style of etcd's
// concurrency.Election: one holder at a time, on the holder's election
// lease, its CreateRevision the holder's token.
type electionKey struct {
	leases  leases
	keys    group.Keys
	node    string
	timeout time.Duration
}

// campaignResult: won with token, or lost to leader.
type campaignResult struct {
	won    bool
	token  int64
	leader group.LeaderInfo
}

// campaign tries once to create the key on lease id. The transaction
// succeeds only if no key exists, so two members racing get exactly one
// winner. The winner re-reads the key to confirm it is still its own (same
// CreateRevision, same lease) before anything starts: an error then means
// the win cannot be trusted.
func (e electionKey) campaign(ctx context.Context, id clientv3.LeaseID) (campaignResult, error) {
	c, err := e.leases.putOnLease(ctx, e.keys.Leader(), e.node, id)
	if err != nil {
		return campaignResult{}, fmt.Errorf("campaign: %w", err)
	}
	if !c.ours {
		var kvs []*mvccpb.KeyValue
		if c.other != nil {
			kvs = append(kvs, c.other)
		}
		return campaignResult{leader: group.DecodeLeader(kvs, c.rev)}, nil
	}
	token := c.createRev
	li, err := e.read(ctx)
	if err != nil || li.Token != token || li.Lease != id {
		if err == nil {
			err = fmt.Errorf("election key changed right after winning it (token %d, now %d by %q)", token, li.Token, li.Node)
		}
		return campaignResult{}, fmt.Errorf("verify election key: %w", err)
	}
	return campaignResult{won: true, token: token}, nil
}

// resign deletes the key if it is still the one created at token.
func (e electionKey) resign(ctx context.Context, token int64) error {
	key := e.keys.Leader()
	rctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	_, err := e.leases.pool.Hedged().Txn(rctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", token)).
		Then(clientv3.OpDelete(key)).Commit()
	return err
}

// read returns who holds the key (hedged).
func (e electionKey) read(ctx context.Context) (group.LeaderInfo, error) {
	rctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	return group.ReadLeader(rctx, e.leases.pool.Hedged(), e.keys)
}

type acquireResult struct {
	won    bool
	lease  lease
	token  int64
	leader group.LeaderInfo
	// memberGone: etcd no longer has member, the member lease the job was
	// launched with, so no campaign was made; the loop registers again
	// first.
	memberGone bool
	// member is the member lease the job was launched with: a win is only
	// promoted while the loop still has it.
	member clientv3.LeaseID
}

// acquireJob campaigns once on a fresh lease: grant, campaign, and on a win
// note the lease for a successor; any lease not won with goes back.
//
// Beside the grant it renews member, our member lease as the loop knew it at
// the launch, once, and does not campaign when etcd answers that it no
// longer exists: a standby paused or cut off past its TTL comes back to a
// free key before its renewer has noticed, and a win there fails the
// promotion at its first record write (the record lives on the member
// lease) with a cooldown, handing the group to someone else (lab scenario
// 70). The lease is the one of the launch, not the renewer's current one:
// the renewer may learn of the loss and clear it while the job runs. An
// answer that proves nothing (a timeout) does not hold the campaign up.
// member 0 (a test's unregistered node) skips the check.
func (s *Supervisor) acquireJob(ctx context.Context, member clientv3.LeaseID) (acquireResult, error) {
	if err := s.dropinsStillGood(ctx); err != nil {
		return acquireResult{}, err
	}
	gone := make(chan bool, 1)
	go func() {
		if member == 0 {
			gone <- false
			return
		}
		rctx, cancel := context.WithTimeout(ctx, s.cfg.Etcd.RequestTimeout)
		defer cancel()
		_, _, err := s.leases.keepAliveOnce(rctx, member)
		gone <- errors.Is(err, rpctypes.ErrLeaseNotFound)
	}()
	l, err := s.leases.grant(ctx, s.cfg.Lease.TTL)
	if <-gone {
		if err == nil {
			s.leases.revoke(l.id)
		}
		return acquireResult{memberGone: true, member: member}, nil
	}
	if err != nil {
		return acquireResult{}, err
	}
	c, err := s.election.campaign(ctx, l.id)
	if err != nil || !c.won {
		s.leases.revoke(l.id)
		return acquireResult{leader: c.leader}, err
	}
	// Before anything can start under this lease: a successor started after
	// a crash must find it to give it back.
	s.saveRunState(func(st *runstate.State) { st.ElectionLease, st.Token = int64(l.id), c.token })
	return acquireResult{won: true, lease: l, token: c.token, member: member}, nil
}

// release gives up the election key (only if it is still ours) and its
// lease, so the next member can win at once instead of after the TTL. It
// reports whether etcd confirmed both.
func (s *Supervisor) release(ctx context.Context, token int64, id clientv3.LeaseID) bool {
	if token == 0 {
		return true
	}
	err := s.election.resign(ctx, token)
	if err != nil {
		s.log.Warn("release election key", "err", err)
	}
	return s.leases.revoke(id) && err == nil
}
