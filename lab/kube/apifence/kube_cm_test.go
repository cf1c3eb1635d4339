//go:build kube

package apifence_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kha-supervisor/kha-supervisor/apifence/gate"
	"github.com/kha-supervisor/kha-supervisor/lab/kube"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/build"
	"github.com/kha-supervisor/kha-supervisor/lab/proc"
)

// testRealControllerManager: the real kube-controller-manager, with
// --use-service-account-credentials as kubeadm runs it, through the gate.
// Its controllers authenticate with their service accounts' bearer tokens
// (TokenReview at the gate); the ReplicaSet controller's pod creates must
// reach the apiserver as system:serviceaccount:kube-system:replicaset-controller
// carrying the term's token, and be admitted.
func testRealControllerManager(t *testing.T, p *plane, sup *rest.Config) {
	bins, err := build.Lookup("", build.DefaultVersion)
	if err != nil {
		t.Fatal(err)
	}
	gd := startGate(t, p, 101, sup)
	c := kube.Component{Name: kube.ControllerManager, Binary: bins.Path("kube-controller-manager"), Dir: filepath.Join(t.TempDir(), "cm"),
		CA: p.ca, Server: gd.g.URL(), Address: "127.0.0.1", Port: freePort(t), ServiceAccountKey: p.saKey}
	f, err := c.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	// What install-kubeconfig makes of it: the gate, its CA, the unit's own certificate.
	writeKubeconfig(t, f.Kubeconfig, &rest.Config{Host: gd.g.URL(), TLSClientConfig: rest.TLSClientConfig{
		CAData: gd.local.PEM(), CertFile: f.Client.CertFile, KeyFile: f.Client.KeyFile}})
	if _, err := proc.Start(proc.Spec{Argv: append([]string{c.Binary}, c.Args(f)...), PIDFile: f.PIDFile, LogFile: f.Log, Dir: c.Dir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Stop(context.Background(), f.PIDFile, 10*time.Second) })

	admin := clientset(t, p.config(t, 0, "admin", "system:masters"))
	two := int32(2)
	labels := map[string]string{"app": "fenced"}
	if _, err := admin.AppsV1().ReplicaSets("default").Create(t.Context(), &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "fenced"},
		Spec: appsv1.ReplicaSetSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pods, err := admin.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "app=fenced"})
		if err == nil && len(pods.Items) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(f.Log)
			t.Fatalf("the gated controller-manager created no pods for the ReplicaSet in 3 min; its log:\n%s", tailOf(string(data), 40))
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Who wrote them, judged at the resource.
	var seen int
	file, err := os.Open(p.audit[0])
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditEvent
		if json.Unmarshal(sc.Bytes(), &e) != nil || e.Stage != "ResponseComplete" || e.Verb != "create" || e.ObjectRef == nil ||
			e.ObjectRef.Resource != "pods" || e.ImpersonatedUser == nil || e.ResponseStatus == nil || e.ResponseStatus.Code != 201 {
			continue
		}
		if e.ImpersonatedUser.Username == "system:serviceaccount:kube-system:replicaset-controller" &&
			tokenString(e.ImpersonatedUser.Extra[gate.TokenExtra]) == "101" {
			seen++
		}
	}
	if seen < 2 {
		t.Errorf("audit log: %d pod creates by replicaset-controller with token 101 through the gate, want 2", seen)
	}
	t.Logf("the real kube-controller-manager (--use-service-account-credentials) created %d pods through the gate as replicaset-controller with token 101", seen)
}
