//go:build kube

package apifence_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/build"
	"github.com/kha-supervisor/kha-supervisor/lab/proc"
)

// writeKubeconfig writes c (certificate files or CA data) as a kubeconfig.
func writeKubeconfig(t *testing.T, path string, c *rest.Config) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["k"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthority: c.CAFile, CertificateAuthorityData: c.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificate: c.CertFile, ClientKey: c.KeyFile}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "k", AuthInfo: "u"}
	kc.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
}

// startScheduler runs the real kube-scheduler (no leader election, as
// under kha-supervisor) with kubeconfig, stopped at cleanup.
func startScheduler(t *testing.T, name string, kubeconfig string) string {
	t.Helper()
	bins, err := build.Lookup("", build.DefaultVersion)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), name)
	pid, log := filepath.Join(dir, "pid"), filepath.Join(dir, "log")
	if _, err := proc.Start(proc.Spec{Argv: []string{bins.Path("kube-scheduler"),
		"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", freePort(t)), "--v=2",
	}, PIDFile: pid, LogFile: log, Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Stop(context.Background(), pid, 10*time.Second) })
	return log
}

func readyNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), Reason: "Test"}},
		},
	}
}

func createPod(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Pods("default").Create(t.Context(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		// The apiserver taints a new node not-ready (no controller-manager
		// runs here to lift it): tolerate everything.
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func boundTo(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Spec.NodeName
}

// testRealScheduler: the real kube-scheduler through the gate binds pods
// while the term is open; once the gate is cut and closed nothing more is
// bound; a second real scheduler started by hand with the scheduler's own
// certificate straight at the apiserver (bypassing the gate) binds nothing:
// its bindings are refused by the policy.
func testRealScheduler(t *testing.T, p *plane, sup *rest.Config) {
	admin := clientset(t, p.config(t, 0, "admin", "system:masters"))
	if _, err := admin.CoreV1().Nodes().Create(t.Context(), readyNode("w1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gd := startGate(t, p, 101, sup)
	direct := p.config(t, 0, "system:kube-scheduler")
	dir := t.TempDir()
	viaGate := filepath.Join(dir, "scheduler-gate.kubeconfig")
	writeKubeconfig(t, viaGate, gd.throughGate(direct))
	log := startScheduler(t, "gated", viaGate)

	createPod(t, admin, "through-gate")
	deadline := time.Now().Add(2 * time.Minute)
	for boundTo(t, admin, "through-gate") == "" {
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(log)
			t.Fatalf("the gated scheduler did not bind the pod in 2 min; its log:\n%s", tailOf(string(data), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the real kube-scheduler bound pod through-gate to %s through the gate", boundTo(t, admin, "through-gate"))

	// Fence: the term closes, the gate is cut. Nothing is bound any more.
	gd.term.set(gate.Term{Reason: "fenced (test)"})
	gd.g.Cut()
	createPod(t, admin, "after-cut")

	// The operator's hand-started scheduler, straight at the apiserver.
	bypass := filepath.Join(dir, "scheduler-direct.kubeconfig")
	writeKubeconfig(t, bypass, direct)
	dlog := startScheduler(t, "bypass", bypass)
	time.Sleep(20 * time.Second)
	if n := boundTo(t, admin, "after-cut"); n != "" {
		t.Errorf("pod after-cut was bound to %s: by the cut gate's scheduler or the bypassing one", n)
	}
	data, _ := os.ReadFile(dlog)
	if !strings.Contains(string(data), "does not carry the current fencing token") {
		t.Errorf("the bypassing scheduler's log shows no refusal by the policy; its log:\n%s", tailOf(string(data), 30))
	} else {
		t.Logf("the bypassing scheduler's bindings were refused by the policy (its log names the policy message)")
	}
}

func tailOf(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
