package etcdconn

import (
	"context"
	"errors"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestLeaseSafeVersion(t *testing.T) {
	for _, tc := range []struct {
		v    string
		safe bool
	}{
		{"3.5.13", true},
		{"v3.5.13", true},
		{"3.5.12", false},
		{"3.5.0", false},
		{"3.5.13-rc.0", false}, // a pre-release of the fix is not the fix
		{"3.5.14-rc.0", true},
		{"3.5.21", true},
		{"3.5.13+git", true},
		{"3.4.31", true},
		{"3.4.30", false},
		{"3.4.40", true},
		{"3.4.0", false},
		{"3.3.27", false},
		{"3.2.32", false},
		{"3.6.0", true},
		{"3.6.0-alpha.0", true},
		{"3.7.3", true},
		{"4.0.0", true},
		{"2.3.8", false},
		{"", false},
		{"3.5", false},
		{"3.5.x", false},
		{"3.05.13", false},
		{"garbage", false},
	} {
		if got := LeaseSafeVersion(tc.v); got != tc.safe {
			t.Errorf("LeaseSafeVersion(%q) = %v, want %v", tc.v, got, tc.safe)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		sign int
	}{
		{"3.5.13", "3.5.13", 0},
		{"3.5.9", "3.5.13", -1},
		{"3.4.31", "3.5.0", -1},
		{"3.6.0", "3.5.99", 1},
		{"3.6.0-rc.1", "3.6.0", -1},
		{"3.6.0-rc.1", "3.6.0-rc.2", -1},
		{"junk", "3.0.0", -1},
		{"3.0.0", "junk", 1},
	} {
		got := compareVersions(tc.a, tc.b)
		if (got < 0 && tc.sign >= 0) || (got > 0 && tc.sign <= 0) || (got == 0 && tc.sign != 0) {
			t.Errorf("compareVersions(%q, %q) = %d, want sign %d", tc.a, tc.b, got, tc.sign)
		}
	}
}

// fakeClient answers Status from a table: a version, or an error.
type fakeClient map[string]any

func (f fakeClient) Endpoints() []string {
	var eps []string
	for ep := range f {
		eps = append(eps, ep)
	}
	return eps
}

func (f fakeClient) Status(_ context.Context, ep string) (*clientv3.StatusResponse, error) {
	switch v := f[ep].(type) {
	case string:
		return &clientv3.StatusResponse{Version: v, Header: &pb.ResponseHeader{}}, nil
	case error:
		return nil, v
	}
	return nil, errors.New("unknown endpoint")
}

func TestServerVersionLowest(t *testing.T) {
	v, err := ServerVersion(context.Background(), fakeClient{
		"https://e1:2379": "3.6.4",
		"https://e2:2379": "3.5.12",
		"https://e3:2379": errors.New("connection refused"),
		"https://e4:2379": "3.5.21",
	})
	if err != nil {
		t.Fatal(err)
	}
	if v != "3.5.12" {
		t.Fatalf("ServerVersion = %q, want the lowest answering version 3.5.12", v)
	}
	_, err = ServerVersion(context.Background(), fakeClient{
		"https://e1:2379": errors.New("connection refused"),
		"https://e2:2379": errors.New("tls: bad certificate"),
	})
	if err == nil || !strings.Contains(err.Error(), "https://e2:2379: tls: bad certificate") {
		t.Fatalf("ServerVersion with no endpoint answering: %v; want an error naming each endpoint", err)
	}
}
