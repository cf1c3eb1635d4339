//go:build kube

package apifence_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence"
)

// TestAPIFenceRefusesAnUnlistedThirdAPIServer (issue 23 item 3): three
// real kube-apiservers on one etcd, two listed. The third is never
// confirmed, so its admission could keep the old token: the publication
// fails naming it, and the token is not moved; with all three listed it
// succeeds.
//
//	go test -tags kube -timeout 20m -run TestAPIFenceRefusesAnUnlisted ./lab/kube/apifence/
func TestAPIFenceRefusesAnUnlistedThirdAPIServer(t *testing.T) {
	p := startPlaneAt(t, true, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	admin := clientset(t, p.config(t, 0, "admin", "system:masters"))
	install(t, admin, apifence.Build(apifence.ManifestOptions{}).Objects())
	sup := func(i ...int) []*rest.Config {
		var out []*rest.Config
		for _, n := range i {
			out = append(out, p.config(t, n, apifence.DefaultSupervisorUser))
		}
		return out
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	// Each apiserver creates its identity lease soon after it starts:
	// wait until the cluster knows all three.
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	var last error
	for wctx.Err() == nil {
		_, last = apifence.CheckSet(wctx, sup(0))
		if last != nil && strings.Contains(last.Error(), "127.0.0.2") && strings.Contains(last.Error(), "127.0.0.3") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("apiserver 0 alone listed: %v", last)
	pub := &apifence.Publisher{Endpoints: sup(0, 1)}
	_, err := pub.Publish(ctx, 100)
	if !errors.Is(err, apifence.ErrUnlisted) || !strings.Contains(err.Error(), "127.0.0.3") || strings.Contains(err.Error(), "127.0.0.2 ") {
		t.Fatalf("publish with 127.0.0.3 unlisted: %v; want ErrUnlisted naming 127.0.0.3 only", err)
	}
	t.Logf("two of three listed: %v", err)
	if tok, err := pub.Read(ctx); err != nil || tok != 0 {
		t.Errorf("the parameter holds %d (%v) after the refused publication; want nothing published", tok, err)
	}
	pub.Endpoints = sup(0, 1, 2)
	got, err := pub.Publish(ctx, 100)
	if err != nil {
		t.Fatalf("publish with all three listed: %v", err)
	}
	t.Logf("all three listed: published and confirmed in %s", got.Took.Round(time.Millisecond))
}
