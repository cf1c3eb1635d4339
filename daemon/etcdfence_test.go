package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kha-supervisor/kha-supervisor/internal/etcdtest"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/etcdconn"
)

// etcd_fence is refused at start-up, naming why, when etcd could not carry
// it out; with auth on, a root identity and every user present it passes.
func TestEtcdFenceCheckedAtStart(t *testing.T) {
	kha, root := authEtcd(t)
	plain := config.Default().Etcd
	plain.Endpoints = etcdtest.NewCluster(t, etcdtest.Options{Members: 1}).Endpoints()
	for _, tc := range []struct {
		name  string
		etcd  config.Etcd
		users []string
		role  string
		want  string // "" passes
	}{
		{"auth off", plain, []string{"m1=kha"}, "kha", "auth is not enabled"},
		{"not root", kha, []string{"m1=kha"}, "kha", "needs etcd's root role"},
		{"role missing", root, []string{"m1=kha"}, "kube-apiserver", `etcd_fence.role "kube-apiserver": no such role`},
		{"user missing", root, []string{"m1=kha", "m2=kube-apiserver-m2"}, "kha", "kube-apiserver-m2 (the kube-apiserver of m2) is no etcd user"},
		{"no key where the role grants", root, []string{"m1=kha", "m2=root"}, "kha", `etcd_fence.role "kha" grants prefix "/kha-supervisor/", and this etcd holds no key there`},
		{"fine", root, []string{"m1=kha", "m2=root"}, "kha", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Node, cfg.Etcd = "m1", tc.etcd
			cfg.EtcdFence = config.EtcdFence{Role: tc.role, Users: tc.users}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			cli, err := etcdconn.Dial(ctx, cfg.Etcd)
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			if tc.name == "fine" { // the apiservers' data, under the role's prefix
				if _, err := cli.Put(ctx, "/kha-supervisor/registry/pods/x", "v"); err != nil {
					t.Fatal(err)
				}
			}
			err = checkEtcdFence(ctx, cli, cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			case tc.want != "" && !errors.Is(err, errEtcdFenceSetup):
				t.Fatalf("%v is not marked a configuration error (exit 2)", err)
			}
		})
	}
}
