package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// answerGrace is how long an operator command waits for the other
// endpoints once one has answered: enough for live members on a LAN to
// answer too (their cluster IDs are compared), not for a dead one.
const answerGrace = 150 * time.Millisecond

// dialClient connects an operator command to etcd. Unlike the daemon's
// etcdconn.Dial it does not wait for every endpoint: it returns once one
// endpoint answered (and the others that answered within answerGrace
// belong to the same cluster), so one dead member of two costs nothing.
// The client library's log is dropped: a command's errors come back as its
// message, and a Go-log line on stderr is noise an operator cannot act on.
// Only when no endpoint answers does it fall back to etcdconn.Dial, whose
// error names every endpoint and its cause.
func dialClient(ctx context.Context, cfg config.Etcd) (*clientv3.Client, error) {
	cc, err := etcdconn.ClientConfig(cfg)
	if err != nil {
		return nil, err
	}
	cc.Logger = zap.NewNop()
	cli, err := clientv3.New(cc)
	if err != nil {
		return etcdconn.Dial(ctx, cfg)
	}
	ctx, cancel := context.WithTimeout(ctx, cc.DialTimeout+cfg.RequestTimeout)
	defer cancel()
	if err := firstAnswer(ctx, cli); err != nil {
		_ = cli.Close()
		if errors.Is(err, etcdconn.ErrForeignCluster) {
			return nil, err
		}
		return etcdconn.Dial(ctx, cfg)
	}
	return cli, nil
}

type answer struct {
	endpoint string
	cluster  uint64
	err      error
}

// firstAnswer asks every endpoint for its status at once and returns when
// one answered and answerGrace passed (or all answered), refusing
// endpoints of two etcd clusters among those that answered.
func firstAnswer(ctx context.Context, cli *clientv3.Client) error {
	eps := cli.Endpoints()
	ch := make(chan answer, len(eps))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, ep := range eps {
		go func() {
			resp, err := cli.Status(sctx, ep)
			a := answer{endpoint: ep, err: err}
			if err == nil && resp.Header != nil {
				a.cluster = resp.Header.ClusterId
			}
			ch <- a
		}()
	}
	var grace <-chan time.Time
	byCluster := map[uint64][]string{}
	var errs []error
	for range eps {
		select {
		case a := <-ch:
			if a.err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", a.endpoint, a.err))
				continue
			}
			byCluster[a.cluster] = append(byCluster[a.cluster], a.endpoint)
			if grace == nil {
				grace = time.After(answerGrace)
			}
		case <-grace:
			return sameClusterErr(byCluster)
		}
	}
	if len(byCluster) == 0 {
		return errors.Join(errs...)
	}
	return sameClusterErr(byCluster)
}

func sameClusterErr(byCluster map[uint64][]string) error {
	if len(byCluster) < 2 {
		return nil
	}
	var parts []string
	for id, eps := range byCluster {
		parts = append(parts, fmt.Sprintf("cluster %x: %s", id, strings.Join(eps, ",")))
	}
	return fmt.Errorf("etcd: %w: the endpoints belong to %d different etcd clusters (%s); list only members of one cluster",
		etcdconn.ErrForeignCluster, len(byCluster), strings.Join(parts, "; "))
}
