package apifence

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/internal/kubeapi"
)

func resolver(m map[string][]string) func(context.Context, string) ([]string, error) {
	return func(_ context.Context, h string) ([]string, error) {
		if a, ok := m[h]; ok {
			return a, nil
		}
		return nil, errors.New("no such host")
	}
}

// The comparison: addresses against the listed hosts (names resolved),
// lease hosts only when they outnumber the entries.
func TestUnlistedNamesEveryApiserverTheListLacks(t *testing.T) {
	dns := resolver(map[string][]string{"m1.lab": {"10.0.0.11"}, "m2.lab": {"10.0.0.12"}, "m1": {"10.0.0.11"}, "m2": {"10.0.0.12"}})
	for name, tc := range map[string]struct {
		listed []string
		known  Known
		want   []string
	}{
		"all listed by address": {[]string{"https://10.0.0.11:6443", "https://10.0.0.12:6443"},
			Known{Addresses: []string{"10.0.0.11", "10.0.0.12"}, Hosts: []string{"m1", "m2"}}, nil},
		"all listed by name": {[]string{"https://m1.lab:6443", "https://m2.lab:6443"},
			Known{Addresses: []string{"10.0.0.12", "10.0.0.11"}, Hosts: []string{"m1", "m2"}}, nil},
		"a third address": {[]string{"https://10.0.0.11:6443", "https://10.0.0.12:6443"},
			Known{Addresses: []string{"10.0.0.11", "10.0.0.12", "10.0.0.13"}}, []string{"10.0.0.13 "}},
		"a third host, no endpoints": {[]string{"https://10.0.0.11:6443", "https://10.0.0.12:6443"},
			Known{Hosts: []string{"m1", "m2", "m3"}}, []string{"host m3 "}},
		// Three apiservers on one host (the test plane) renew one lease.
		"one host, several apiservers": {[]string{"https://127.0.0.1:6443", "https://127.0.0.1:6444"},
			Known{Addresses: []string{"127.0.0.1"}, Hosts: []string{"builder"}}, nil},
		// A load balancer's address is not an apiserver's.
		"the balancer only": {[]string{"https://10.0.0.10:6443"},
			Known{Addresses: []string{"10.0.0.11", "10.0.0.12"}, Hosts: []string{"m1", "m2"}}, []string{"10.0.0.11 ", "10.0.0.12 ", "host m1 ", "host m2 "}},
	} {
		t.Run(name, func(t *testing.T) {
			got := Unlisted(t.Context(), tc.listed, tc.known, dns)
			if len(got) != len(tc.want) {
				t.Fatalf("unlisted %q, want %d naming %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("unlisted[%d] = %q, want it to name %q", i, got[i], w)
				}
			}
		})
	}
}

func TestFreshHostsDropsLeasesLongUnrenewed(t *testing.T) {
	now := time.Now()
	lease := func(host string, ago time.Duration) coordv1.Lease {
		l := coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "apiserver-" + host, Labels: map[string]string{"kubernetes.io/hostname": host}}}
		l.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-ago)}
		return l
	}
	got := freshHosts([]coordv1.Lease{lease("m2", 5*time.Second), lease("m1", 0), lease("gone", 20*time.Minute)})
	if !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("fresh hosts %v, want [m1 m2] (gone's lease is 20 min old)", got)
	}
}

// clusterServer is an admissionServer whose cluster also tells its
// apiservers: default/kubernetes's EndpointSlice and the identity leases.
type clusterServer struct {
	*admissionServer
	addresses []string
	hosts     []string // of the identity leases, renewed now
}

func (s clusterServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes":
		es := discoveryv1.EndpointSlice{TypeMeta: metav1.TypeMeta{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1"}}
		for _, a := range s.addresses {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&es)
	case "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases":
		w.Header().Set("Content-Type", "application/json")
		ll := coordv1.LeaseList{TypeMeta: metav1.TypeMeta{Kind: "LeaseList", APIVersion: "coordination.k8s.io/v1"}}
		for _, h := range s.hosts {
			l := coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "apiserver-" + h, Labels: map[string]string{"kubernetes.io/hostname": h}}}
			l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
			ll.Items = append(ll.Items, l)
		}
		_ = json.NewEncoder(w).Encode(&ll)
	default:
		s.admissionServer.ServeHTTP(w, r)
	}
}

// Three apiservers, two listed: the third is never confirmed, so its
// admission may keep the old token; the promotion must fail naming it,
// and must not move the token.
func TestPublishFailsWhenTheClusterHasAnUnlistedApiserver(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	param := &paramServer{cm: kubeapi.ConfigMap{Data: map[string]string{"token": "5"}}}
	param.cm.Name, param.cm.Namespace = ParamName, Namespace
	var mu sync.Mutex
	cached := func() string { return param.cm.Data["token"] }
	srv := clusterServer{&admissionServer{param: param, mu: &mu, cached: cached, etcdOK: true}, []string{"127.0.0.1", "10.99.0.13"}, nil}
	p := &Publisher{Endpoints: []*rest.Config{endpoint(t, srv), endpoint(t, srv)}, Group: "g"}
	_, err := p.Publish(ctx, 9)
	if !errors.Is(err, ErrUnlisted) || !strings.Contains(err.Error(), "10.99.0.13") {
		t.Fatalf("publish with 10.99.0.13 unlisted: %v, want ErrUnlisted naming it", err)
	}
	if param.puts != 0 {
		t.Errorf("the token was written (%d PUTs) although the promotion fails", param.puts)
	}
	srv.addresses = []string{"127.0.0.1"}
	p.Endpoints = []*rest.Config{endpoint(t, srv), endpoint(t, srv)}
	if _, err := p.Publish(ctx, 9); err != nil {
		t.Errorf("publish with every apiserver listed: %v", err)
	}
}

// blackholeDNS makes net.DefaultResolver's queries go unanswered (as from a
// network namespace whose nameserver is unreachable: the lab's masters)
// until the test ends.
func blackholeDNS(t *testing.T) {
	r := net.DefaultResolver
	preferGo, dial := r.PreferGo, r.Dial
	r.PreferGo = true
	r.Dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	t.Cleanup(func() { r.PreferGo, r.Dial = preferGo, dial })
}

// The lab's real plane: every apiserver listed by address, their identity
// leases naming hosts this node cannot resolve, and DNS that does not
// answer. The set is proven by the addresses alone (no more lease hosts
// than entries), so nothing needs resolving; resolving anyway spent the
// whole confirm timeout and failed every promotion with "read kha's etcd
// cluster ID and revision: context deadline exceeded".
func TestPublishDoesNotWaitForNameResolution(t *testing.T) {
	blackholeDNS(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	param := &paramServer{cm: kubeapi.ConfigMap{Data: map[string]string{"token": "5"}}}
	param.cm.Name, param.cm.Namespace = ParamName, Namespace
	var mu sync.Mutex
	cached := func() string { return param.cm.Data["token"] }
	srv := clusterServer{&admissionServer{param: param, mu: &mu, cached: cached, etcdOK: true}, []string{"127.0.0.1"}, []string{"tk-m1", "tk-m2"}}
	etcd := func(ctx context.Context) (EtcdState, error) {
		if err := ctx.Err(); err != nil {
			return EtcdState{}, err
		}
		return EtcdState{ClusterID: 0xc1, Revision: 100}, nil
	}
	p := &Publisher{Endpoints: []*rest.Config{endpoint(t, srv), endpoint(t, srv)}, Group: "g", Etcd: etcd}
	start := time.Now()
	if _, err := p.Publish(ctx, 9); err != nil {
		t.Fatalf("publish after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("publish took %s with DNS silent; want well under a second", took)
	}
	// A third lease: now the hosts must be resolved, and each lookup gives
	// up after resolveTimeout, not at the confirm timeout.
	srv.hosts = append(srv.hosts, "tk-m3")
	p.Endpoints = []*rest.Config{endpoint(t, srv), endpoint(t, srv)}
	start = time.Now()
	_, err := p.Publish(ctx, 10)
	took := time.Since(start)
	if !errors.Is(err, ErrUnlisted) || !strings.Contains(err.Error(), "tk-m3") || took > resolveTimeout+time.Second {
		t.Errorf("publish with three lease hosts, two listed, DNS silent: %v after %s; want ErrUnlisted naming tk-m3 within %s",
			err, took.Round(time.Millisecond), resolveTimeout+time.Second)
	}
}
