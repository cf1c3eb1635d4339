package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/kha-supervisor/kha-supervisor/apifence"
)

const schedulerKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: https://10.0.0.11:6443
    certificate-authority: /etc/kubernetes/pki/ca.crt
contexts:
- name: system:kube-scheduler@kubernetes
  context: {cluster: kubernetes, user: system:kube-scheduler}
current-context: system:kube-scheduler@kubernetes
users:
- name: system:kube-scheduler
  user:
    client-certificate: /etc/kubernetes/pki/sched.crt
    client-key: /etc/kubernetes/pki/sched.key
`

func TestInstallKubeconfigPointsTheUnitAtItsGate(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "scheduler.conf")
	if err := os.WriteFile(kc, []byte(schedulerKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	// mode "gate": with the fence off install-kubeconfig is refused.
	cfg := gateConfig(t, "gate", state)

	// Dry run: says what changes, writes nothing, creates no CA.
	code, out, errOut := runCmd(t, "install-kubeconfig", "kube-scheduler.service", "-c", cfg, "--kubeconfig", kc, "--dry-run")
	if code != exitOK {
		t.Fatalf("dry run: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"server https://10.0.0.11:6443 -> https://127.0.0.1:16442", "certificate-authority /etc/kubernetes/pki/ca.crt", "dry run, not written"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry-run output lacks %q:\n%s", want, out)
		}
	}
	if data, _ := os.ReadFile(kc); string(data) != schedulerKubeconfig {
		t.Error("dry run changed the kubeconfig")
	}
	if _, err := os.Stat(state); err == nil {
		t.Error("dry run created the state directory")
	}

	code, out, errOut = runCmd(t, "install-kubeconfig", "-c", cfg, "--kubeconfig", kc, "kube-scheduler.service")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	got, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	cl := got.Clusters["kubernetes"]
	ca, _ := os.ReadFile(filepath.Join(state, "gate-ca.crt"))
	if cl.Server != "https://127.0.0.1:16442" || cl.CertificateAuthority != "" || string(cl.CertificateAuthorityData) != string(ca) {
		t.Errorf("cluster after install: %+v", cl)
	}
	if u := got.AuthInfos["system:kube-scheduler"]; u.ClientCertificate != "/etc/kubernetes/pki/sched.crt" {
		t.Errorf("the unit's own credential changed: %+v", u)
	}
	if orig, _ := os.ReadFile(kc + ".kha-orig"); string(orig) != schedulerKubeconfig {
		t.Error("the original was not kept")
	}
	// Again: nothing to change, and the backup stays the original.
	code, out, _ = runCmd(t, "install-kubeconfig", "-c", cfg, "--kubeconfig", kc, "kube-scheduler.service")
	if code != exitOK || !strings.Contains(out, "nothing to change") {
		t.Errorf("second run: exit %d: %s", code, out)
	}
	if orig, _ := os.ReadFile(kc + ".kha-orig"); string(orig) != schedulerKubeconfig {
		t.Error("the second run overwrote the original")
	}
}

func TestInstallKubeconfigRefusals(t *testing.T) {
	cfg := writeConfig(t, "node = \"m1\"\n")
	for name, args := range map[string][]string{
		"no unit":        {"install-kubeconfig", "-c", cfg},
		"unit not gated": {"install-kubeconfig", "-c", cfg, "other.service"},
		"missing file":   {"install-kubeconfig", "-c", cfg, "--kubeconfig", "/nonexistent/k.conf", "kube-scheduler.service"},
		"two units":      {"install-kubeconfig", "-c", cfg, "kube-scheduler.service", "x"},
	} {
		if code, _, errOut := runCmd(t, args...); code != exitConfig || errOut == "" {
			t.Errorf("%s: exit %d (%q), want %d with a message", name, code, errOut, exitConfig)
		}
	}
}

func TestAPIFenceManifestsPrintsThePolicy(t *testing.T) {
	code, out, errOut := runCmd(t, "api-fence", "manifests", "--token", "0", "--supervisor-user", "kha-m1", "--supervisor-user", "kha-m2", "--ca-bundle", testCA(t))
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// Token mode: the policy set and the webhook's registration beside it
	// (issue 23 item 1: the webhook is the authority on a stale token).
	for _, want := range []string{"kind: ValidatingAdmissionPolicy\n", "kind: ValidatingAdmissionPolicyBinding", "parameterNotFoundAction: Deny",
		"kind: ValidatingWebhookConfiguration", "url: " + apifence.DefaultWebhookURL, "failurePolicy: Fail", "caBundle: ",
		"'*/*'", "kind: ConfigMap", "name: " + apifence.ParamName, "userextras/kha.io/fencing-token", "name: kha-m2", "has(request.userInfo.extra)"} {
		if !strings.Contains(out, want) {
			t.Errorf("manifests lack %q", want)
		}
	}
	_, rbac, _ := runCmd(t, "api-fence", "manifests", "--rbac-only")
	if !strings.Contains(rbac, "kind: ClusterRole\n") || strings.Contains(rbac, "ValidatingAdmissionPolicy") || strings.Contains(rbac, "kind: ConfigMap") {
		t.Errorf("--rbac-only printed more or less than the RBAC:\n%s", rbac)
	}
	if code, _, _ := runCmd(t, "api-fence", "manifests", "--token", "-1"); code != exitConfig {
		t.Errorf("--token -1: exit %d, want %d", code, exitConfig)
	}
	if code, _, _ := runCmd(t, "api-fence", "nonsense"); code != exitConfig {
		t.Errorf("api-fence nonsense: exit %d, want %d", code, exitConfig)
	}
}
