package etcdtest_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func clientFrom(t *testing.T, cfg clientv3.Config) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}
