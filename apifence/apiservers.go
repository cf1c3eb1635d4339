package apifence

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

// The apiservers the cluster itself knows, from two sources:
//
//   - the kubernetes service's EndpointSlice (default/kubernetes): each
//     apiserver's endpoint reconciler lists every apiserver's advertise
//     address there and drops one whose master lease (15 s) lapsed. It
//     names the address, what api_fence.apiservers lists, but carries one
//     port for all and is empty under --endpoint-reconciler-type=none;
//   - the identity Leases in kube-system (label
//     apiserver.kubernetes.io/identity=kube-apiserver), one per host (the
//     name hashes the hostname), renewed every 10 s: they count apiservers
//     on distinct hosts whatever they advertise, and name their hosts.
//
// An apiserver absent from the list is never confirmed: its admission
// could hold the old token for as long as it likes. So every publication
// compares, and fails when the cluster knows more.

// identityLeaseSelector selects the apiservers' identity leases.
const identityLeaseSelector = "apiserver.kubernetes.io/identity=kube-apiserver"

// leaseFresh is how far behind the newest identity lease's renewal
// another may be and still count (they renew every 10 s; a removed
// apiserver's lease lingers for its 1 h duration). Relative to the
// newest, not to this node's clock.
const leaseFresh = time.Minute

// Known is what the cluster says about its apiservers.
type Known struct {
	Addresses []string // IPs in default/kubernetes's EndpointSlice
	Hosts     []string // hostnames of the fresh identity leases
}

// resolveTimeout bounds each name lookup of the comparison: a node whose
// nameserver does not answer (a master in its own network namespace, an
// outage) must not spend the promotion's confirm timeout on DNS.
const resolveTimeout = time.Second

// Unlisted returns the apiservers the cluster knows that listed (the
// https://host:port entries) does not name, each as a readable phrase;
// resolve maps a host name to its addresses (net.DefaultResolver's). An
// address is listed when some entry's host is, or resolves to, it: the
// EndpointSlice carries one port for every apiserver, so ports are not
// compared. Lease hosts count only when there are more fresh leases than
// entries (a host may advertise an address its name does not resolve to);
// then each unmatched one (not named by an entry, none of its addresses
// listed) is unlisted. Names are resolved only when needed, at once, each
// within resolveTimeout: a lookup that fails or times out matches nothing.
func Unlisted(ctx context.Context, listed []string, k Known, resolve func(context.Context, string) ([]string, error)) []string {
	ips, names := map[string]bool{}, map[string]bool{}
	var toResolve []string
	for _, l := range listed {
		u, err := url.Parse(l)
		if err != nil {
			continue
		}
		h := u.Hostname()
		if ip := net.ParseIP(h); ip != nil {
			ips[ip.String()] = true
			continue
		}
		names[strings.ToLower(h)] = true
		toResolve = append(toResolve, h)
	}
	hostsCount := len(k.Hosts) > len(listed)
	if hostsCount {
		toResolve = append(toResolve, k.Hosts...)
	}
	addrs := resolveAll(ctx, toResolve, resolve)
	for _, l := range listed {
		if u, err := url.Parse(l); err == nil {
			for _, a := range addrs[u.Hostname()] {
				if ip := net.ParseIP(a); ip != nil {
					ips[ip.String()] = true
				}
			}
		}
	}
	var out []string
	for _, a := range k.Addresses {
		if ip := net.ParseIP(a); ip != nil && !ips[ip.String()] {
			out = append(out, fmt.Sprintf("%s (in the endpoints of service default/kubernetes)", a))
		}
	}
	if !hostsCount {
		return out
	}
	for _, h := range k.Hosts {
		if !hostListed(h, addrs[h], ips, names) {
			out = append(out, fmt.Sprintf("the apiserver on host %s (identity lease; %d apiservers renew one, %d listed)", h, len(k.Hosts), len(listed)))
		}
	}
	return out
}

// resolveAll looks every name up at once, each within resolveTimeout.
func resolveAll(ctx context.Context, hosts []string, resolve func(context.Context, string) ([]string, error)) map[string][]string {
	out := make(map[string][]string, len(hosts))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
			defer cancel()
			a, err := resolve(rctx, h)
			if err != nil {
				return
			}
			mu.Lock()
			out[h] = a
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

func hostListed(h string, addrs []string, ips, names map[string]bool) bool {
	h = strings.ToLower(h)
	for n := range names {
		if n == h || strings.HasPrefix(n, h+".") || strings.HasPrefix(h, n+".") {
			return true
		}
	}
	return slices.ContainsFunc(addrs, func(a string) bool { ip := net.ParseIP(a); return ip != nil && ips[ip.String()] })
}

// ErrUnlisted means the cluster knows an apiserver api_fence.apiservers
// does not list.
var ErrUnlisted = errors.New("the cluster has apiservers that api_fence.apiservers does not list")

// CheckSet asks every endpoint at once which apiservers the cluster
// knows, takes the first answer, and fails, naming them, when some are not
// among the endpoints (a silent one does not hold the answer up). A
// cluster that cannot be asked (no answer, RBAC missing) fails too: the
// set is unproven.
func CheckSet(ctx context.Context, endpoints []*rest.Config) ([]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		k   Known
		err error
	}
	ch := make(chan answer, len(endpoints))
	for _, ep := range endpoints {
		go func() {
			k, err := knownOn(ctx, ep)
			if err != nil {
				err = fmt.Errorf("%s: %w", ep.Host, err)
			}
			ch <- answer{k, err}
		}()
	}
	listed := make([]string, len(endpoints))
	for i, e := range endpoints {
		listed[i] = e.Host
	}
	var errs []error
	for range endpoints {
		a := <-ch
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		if u := Unlisted(ctx, listed, a.k, net.DefaultResolver.LookupHost); len(u) > 0 {
			return u, fmt.Errorf("api fence: %w: %s; add them to api_fence.apiservers on every node (their admission would never be confirmed)", ErrUnlisted, strings.Join(u, ", "))
		}
		return nil, nil
	}
	return nil, fmt.Errorf("api fence: cannot read the apiservers the cluster knows (re-apply `kha-supervisor api-fence manifests` if RBAC forbids it): %w", errors.Join(errs...))
}

func knownOn(ctx context.Context, ep *rest.Config) (Known, error) {
	api, err := kubeapi.New(ep)
	if err != nil {
		return Known{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var k Known
	es := &discoveryv1.EndpointSlice{}
	switch err := api.Do(rctx, "GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes", nil, nil, es); {
	case apierrors.IsNotFound(err): // --endpoint-reconciler-type=none: the leases alone
	case err != nil:
		return Known{}, fmt.Errorf("endpointslice default/kubernetes: %w", err)
	default:
		for _, e := range es.Endpoints {
			k.Addresses = append(k.Addresses, e.Addresses...)
		}
	}
	leases := &coordv1.LeaseList{}
	q := url.Values{"labelSelector": {identityLeaseSelector}}
	switch err := api.Do(rctx, "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", q, nil, leases); {
	case apierrors.IsNotFound(err): // no coordination API: the addresses alone
	case err != nil:
		return Known{}, fmt.Errorf("identity leases: %w", err)
	}
	k.Hosts = freshHosts(leases.Items)
	return k, nil
}

// freshHosts are the hosts of the leases renewed within leaseFresh of the
// newest one.
func freshHosts(ls []coordv1.Lease) []string {
	var newest time.Time
	for _, l := range ls {
		if r := l.Spec.RenewTime; r != nil && r.After(newest) {
			newest = r.Time
		}
	}
	var out []string
	for _, l := range ls {
		r := l.Spec.RenewTime
		if r == nil || newest.Sub(r.Time) > leaseFresh {
			continue
		}
		h := l.Labels["kubernetes.io/hostname"]
		if h == "" {
			h = l.Name
		}
		out = append(out, h)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
