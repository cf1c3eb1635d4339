// Package etcdload puts an etcd cluster under the kind of traffic and
// maintenance it sees in production, where the supervisor shares etcd with
// the apiserver: a steady stream of writes, a database of a few hundred MB,
// defragmentation, snapshots, compaction and rolling restarts. The lab's
// scenarios and the in-process tests use it to show that none of this moves
// leadership.
package etcdload

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Writer writes Size-byte values at Rate writes per second, cycling over
// Keys distinct keys under Prefix, from Workers goroutines.
type Writer struct {
	Client  *clientv3.Client
	Prefix  string
	Rate    int // writes per second
	Size    int // bytes per value
	Keys    int // distinct keys (default 10,000)
	Workers int // concurrent writers (default 16)
	// Timeout bounds each write (default 5 s).
	Timeout time.Duration
}

// Result is what a Writer did.
type Result struct {
	Writes, Errors int64
	Took           time.Duration
	// Latency percentiles of successful writes.
	P50, P99, Max time.Duration
}

// Rate is the achieved write rate.
func (r Result) Rate() float64 {
	if r.Took <= 0 {
		return 0
	}
	return float64(r.Writes) / r.Took.Seconds()
}

func (r Result) String() string {
	return fmt.Sprintf("%d writes (%.0f/s), %d errors, latency p50 %s p99 %s max %s",
		r.Writes, r.Rate(), r.Errors, r.P50.Round(100*time.Microsecond), r.P99.Round(100*time.Microsecond), r.Max.Round(100*time.Microsecond))
}

func (w Writer) withDefaults() (Writer, error) {
	if w.Client == nil || w.Rate <= 0 || w.Size <= 0 {
		return w, fmt.Errorf("etcdload: Client, Rate and Size are required (rate %d, size %d)", w.Rate, w.Size)
	}
	if w.Keys <= 0 {
		w.Keys = 10000
	}
	if w.Workers <= 0 {
		w.Workers = 16
	}
	if w.Timeout <= 0 {
		w.Timeout = 5 * time.Second
	}
	return w, nil
}

// Run writes until ctx ends and reports what it did. Writes are paced by a
// ticker shared by the workers, so a slow cluster lowers the achieved rate
// instead of building a backlog.
func (w Writer) Run(ctx context.Context) (Result, error) {
	w, err := w.withDefaults()
	if err != nil {
		return Result{}, err
	}
	value := make([]byte, w.Size)
	_, _ = rand.Read(value)
	val := string(value)
	tokens := make(chan int64, w.Workers)
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      atomic.Int64
		wg        sync.WaitGroup
	)
	for range w.Workers {
		wg.Go(func() {
			var mine []time.Duration
			for n := range tokens {
				key := fmt.Sprintf("%s%08d", w.Prefix, n%int64(w.Keys))
				rctx, cancel := context.WithTimeout(ctx, w.Timeout)
				start := time.Now()
				_, err := w.Client.Put(rctx, key, val)
				cancel()
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		})
	}
	start := time.Now()
	every := time.Second / time.Duration(w.Rate)
	t := time.NewTicker(every)
	var n int64
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
			select {
			case tokens <- n:
				n++
			default: // every worker busy: the cluster is slower than the rate
			}
		}
	}
	t.Stop()
	close(tokens)
	wg.Wait()
	r := Result{Writes: int64(len(latencies)), Errors: errs.Load(), Took: time.Since(start)}
	r.P50, r.P99, r.Max = percentiles(latencies)
	return r, nil
}

func percentiles(d []time.Duration) (p50, p99, max time.Duration) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return at(0.50), at(0.99), d[len(d)-1]
}

// Prefill writes n values of size bytes under prefix (keys distinct from a
// Writer's), so the database has the size of a real cluster's.
func Prefill(ctx context.Context, cli *clientv3.Client, prefix string, n, size int) error {
	value := make([]byte, size)
	_, _ = rand.Read(value)
	const batch = 64 // ops per transaction, well under etcd's default max-txn-ops (128)
	for i := 0; i < n; i += batch {
		var ops []clientv3.Op
		for j := i; j < min(n, i+batch); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sfill/%08d", prefix, j), string(value)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("etcdload: prefill at %d of %d: %w", i, n, err)
		}
	}
	return nil
}

// Defragment defragments one member (it blocks that member while it runs)
// and says how long it took.
func Defragment(ctx context.Context, cli *clientv3.Client, endpoint string) (time.Duration, error) {
	start := time.Now()
	if _, err := cli.Defragment(ctx, endpoint); err != nil {
		return 0, fmt.Errorf("etcdload: defragment %s: %w", endpoint, err)
	}
	return time.Since(start), nil
}

// Snapshot streams a snapshot of the database to w, as `etcdctl snapshot
// save` does, and says how many bytes it was and how long it took.
func Snapshot(ctx context.Context, cli *clientv3.Client, w io.Writer) (int64, time.Duration, error) {
	start := time.Now()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("etcdload: snapshot: %w", err)
	}
	defer rc.Close()
	n, err := io.Copy(w, rc)
	if err != nil {
		return n, 0, fmt.Errorf("etcdload: snapshot after %d bytes: %w", n, err)
	}
	return n, time.Since(start), nil
}

// Compact compacts the keyspace up to the current revision (physically, so
// the call returns when the member has done the work).
func Compact(ctx context.Context, cli *clientv3.Client, key string) (time.Duration, error) {
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("etcdload: compact: read revision: %w", err)
	}
	start := time.Now()
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("etcdload: compact to %d: %w", resp.Header.Revision, err)
	}
	return time.Since(start), nil
}
