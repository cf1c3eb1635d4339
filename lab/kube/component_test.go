package kube

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func testComponent(t *testing.T, name string) Component {
	t.Helper()
	a := testAPIServer(t)
	return Component{
		Name: name, Binary: "/cache/" + name, Dir: filepath.Join(t.TempDir(), name), CA: a.CA,
		Server: a.URL(), Address: "127.0.0.1", Port: 10259, ServiceAccountKey: "/a/sa.key",
	}
}

func TestComponentKubeconfigNamesItsRBACUser(t *testing.T) {
	for name, user := range map[string]string{Scheduler: "system:kube-scheduler", ControllerManager: "system:kube-controller-manager"} {
		c := testComponent(t, name)
		f, err := c.Prepare()
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.LoadFromFile(f.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		ctx := cfg.Contexts[cfg.CurrentContext]
		if ctx == nil || ctx.AuthInfo != user || cfg.Clusters[ctx.Cluster].Server != c.Server {
			t.Errorf("%s kubeconfig: context %+v clusters %v", name, ctx, cfg.Clusters)
		}
		if got := loadCert(t, f.Client.CertFile).Subject.CommonName; got != user {
			t.Errorf("%s client certificate CN %q, want %q", name, got, user)
		}
	}
}

func TestComponentArgs(t *testing.T) {
	s := testComponent(t, Scheduler)
	sargs := s.Args(s.files())
	if !slices.Contains(sargs, "--leader-elect=false") || !slices.Contains(sargs, "--secure-port=10259") {
		t.Errorf("scheduler args %v", sargs)
	}
	for _, a := range sargs {
		if strings.HasPrefix(a, "--use-service-account-credentials") || strings.HasPrefix(a, "--service-account-private-key-file") {
			t.Errorf("scheduler got a controller-manager flag %s", a)
		}
	}
	cm := testComponent(t, ControllerManager)
	cm.LeaderElect = true
	cargs := cm.Args(cm.files())
	for _, want := range []string{"--leader-elect=true", "--use-service-account-credentials=true",
		"--service-account-private-key-file=/a/sa.key", "--requestheader-client-ca-file=" + cm.CA.CertFile} {
		if !slices.Contains(cargs, want) {
			t.Errorf("controller-manager args lack %s", want)
		}
	}
}

func TestComponentRejectsBadConfig(t *testing.T) {
	c := testComponent(t, "kube-proxy")
	if _, err := c.Prepare(); err == nil || !strings.Contains(err.Error(), "kube-proxy") {
		t.Errorf("unknown component: %v", err)
	}
	c = testComponent(t, ControllerManager)
	c.ServiceAccountKey = ""
	if _, err := c.Prepare(); err == nil || !strings.Contains(err.Error(), "ServiceAccountKey") {
		t.Errorf("controller-manager without key: %v", err)
	}
	c = testComponent(t, Scheduler)
	c.Port = 0
	if _, err := c.Prepare(); err == nil {
		t.Error("port 0 accepted")
	}
}
