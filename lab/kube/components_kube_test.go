//go:build kube

package kube

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestSchedulerAndControllerManagerAct runs the real kube-scheduler and
// kube-controller-manager (no leader election, as under kha-supervisor)
// against a real apiserver: a ReplicaSet's pods are created by the
// controller-manager and bound by the scheduler to a Node the test keeps
// Ready, and the audit log names each component as the writer: what the lab
// will judge overlap by.
//
//	go test -tags kube -timeout 20m -run TestSchedulerAndControllerManagerAct ./lab/kube
func TestSchedulerAndControllerManagerAct(t *testing.T) {
	bins := binaries(t)
	a, f, _ := startAPIServer(t, bins)
	cs := adminClient(t, a, f)
	for _, name := range []string{ControllerManager, Scheduler} {
		c := Component{Name: name, Binary: bins.Path(name), Dir: filepath.Join(t.TempDir(), name), CA: a.CA,
			Server: a.URL(), Address: "127.0.0.1", Port: freePort(t), ServiceAccountKey: f.ServiceAccount}
		start := time.Now()
		if _, err := c.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s healthy after %s", name, time.Since(start).Round(time.Millisecond))
		t.Cleanup(func() {
			stop := time.Now()
			if err := c.Stop(context.Background(), 30*time.Second); err != nil {
				t.Error(err)
			}
			t.Logf("%s stopped (SIGTERM) in %s", name, time.Since(stop).Round(time.Millisecond))
		})
	}
	createReadyNode(t, cs, "w1")
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: new(int32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	start := time.Now()
	// The ServiceAccount admission plugin refuses pods until the
	// controller-manager has created namespace default's service account;
	// the ReplicaSet controller retries on its own.
	if _, err := cs.AppsV1().ReplicaSets("default").Create(t.Context(), rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pods, err := cs.CoreV1().Pods("default").List(t.Context(), metav1.ListOptions{LabelSelector: "app=probe"})
		if err != nil {
			t.Fatal(err)
		}
		bound := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == "w1" {
				bound++
			}
		}
		if bound == 2 && len(pods.Items) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 minutes: %d pods, %d bound to w1", len(pods.Items), bound)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("ReplicaSet of 2: both pods created and bound %s after its creation", time.Since(start).Round(time.Millisecond))
	writers := auditWriters(t, a.files().AuditLog)
	for _, w := range []string{
		"create pods by system:serviceaccount:kube-system:replicaset-controller: 201",
		"create pods/binding by system:kube-scheduler: 201",
	} {
		if writers[w] < 2 {
			t.Errorf("audit log has %d of %q, want 2; writers: %v", writers[w], w, writers)
		}
	}
}

// createReadyNode registers a Node as a kubelet would, with a Ready
// condition and room for pods; the test is over long before the node
// lifecycle controller's grace period (50 s) would mark it NotReady.
func createReadyNode(t *testing.T, cs *kubernetes.Clientset, name string) {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	n.Status = corev1.NodeStatus{
		Capacity: room, Allocatable: room,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now}},
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// auditWriters counts completed writes as "VERB RESOURCE[/SUB] by USER: CODE".
func auditWriters(t *testing.T, path string) map[string]int {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct {
			auditEvent
			ObjectRef *struct{ Resource, Subresource string } `json:"objectRef"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		if e.Stage != "ResponseComplete" || e.ObjectRef == nil || e.ResponseStatus == nil {
			continue
		}
		r := e.ObjectRef.Resource
		if e.ObjectRef.Subresource != "" {
			r += "/" + e.ObjectRef.Subresource
		}
		out[e.Verb+" "+r+" by "+e.User.Username+": "+itoa(e.ResponseStatus.Code)]++
	}
	return out
}

func itoa(n int) string { return fmt.Sprint(n) }

// TestComponentsExitStatusOnSIGTERM records how each component ends on the
// SIGTERM that systemd sends when kha-supervisor stops a unit: the drop-ins
// must count that stop as normal. Seen with v1.37: kube-scheduler without
// leader election exits 1 ("finished without leader elect"), which systemd
// counts as a failure unless SuccessExitStatus=1; kube-controller-manager
// dies of the signal, which systemd counts as clean.
func TestComponentsExitStatusOnSIGTERM(t *testing.T) {
	bins := binaries(t)
	a, f, _ := startAPIServer(t, bins)
	want := map[string]string{Scheduler: "exit status 1", ControllerManager: "killed by terminated"}
	for _, name := range []string{Scheduler, ControllerManager} {
		c := Component{Name: name, Binary: bins.Path(name), Dir: filepath.Join(t.TempDir(), name), CA: a.CA,
			Server: a.URL(), Address: "127.0.0.1", Port: freePort(t), ServiceAccountKey: f.ServiceAccount}
		cf, err := c.Prepare()
		if err != nil {
			t.Fatal(err)
		}
		log, err := os.Create(cf.Log)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(c.Binary, c.Args(cf)...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // a failure before Wait must not leave it running
			if cmd.ProcessState == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
		})
		healthy := waitHealthy(t, c)
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		stop := time.Now()
		err = cmd.Wait()
		log.Close()
		got := ending(cmd.ProcessState)
		t.Logf("%s: healthy=%v, SIGTERM -> %s after %s (%v)", name, healthy, got, time.Since(stop).Round(time.Millisecond), err)
		if got != want[name] {
			t.Errorf("%s ended with %q on SIGTERM, expected %q: review the drop-ins' SuccessExitStatus\n%s", name, got, want[name], tail(cf.Log, 10))
		}
	}
}

func ending(ps *os.ProcessState) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ps.ExitCode())
}

func waitHealthy(t *testing.T, c Component) bool {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: c.CA.Pool()}}}
	url := "https://" + joinHostPort(c.Address, c.Port) + "/healthz"
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if probe(t.Context(), client, url) == "200" {
			return true
		}
	}
	t.Errorf("%s not healthy after 2 minutes", c.Name)
	return false
}
