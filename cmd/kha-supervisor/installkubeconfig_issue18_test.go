package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/internal/pki"
)

// gateConfig writes a configuration with api_fence.mode = mode whose
// kubeconfig and client CA exist, so that mode "gate" loads.
func gateConfig(t *testing.T, mode, state string) string {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA(filepath.Join(dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "supervisor.kubeconfig")
	if err := os.WriteFile(kc, []byte(schedulerKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return writeConfig(t, "node = \"m1\"\n[api_fence]\nmode = \""+mode+"\"\nstate_dir = \""+state+"\"\nkubeconfig = \""+kc+"\"\nclient_ca = \""+ca.CertFile+"\"\n")
}

// With api_fence.mode = "off" nothing serves the gate: install-kubeconfig
// refuses (exit 2) and leaves the kubeconfig alone; --dry-run still shows
// the changes and says it would be refused.
func TestInstallKubeconfigRefusesWithTheFenceOff(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "scheduler.conf")
	if err := os.WriteFile(kc, []byte(schedulerKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "node = \"m1\"\n[api_fence]\nstate_dir = \""+filepath.Join(dir, "state")+"\"\n")
	code, out, errOut := runCmd(t, "install-kubeconfig", "-c", cfg, "--kubeconfig", kc, "kube-scheduler.service")
	want := `kha-supervisor: api_fence.mode is "off" in ` + cfg + `: nothing serves kube-scheduler.service's gate at 127.0.0.1:16442`
	if code != exitConfig || !strings.HasPrefix(errOut, want) || out != "" {
		t.Errorf("exit %d stdout %q stderr %q; want %d and %q", code, out, errOut, exitConfig, want)
	}
	if data, _ := os.ReadFile(kc); string(data) != schedulerKubeconfig {
		t.Error("the refused run changed the kubeconfig")
	}
	code, out, _ = runCmd(t, "install-kubeconfig", "-c", cfg, "--kubeconfig", kc, "--dry-run", "kube-scheduler.service")
	if code != exitOK || !strings.Contains(out, `note: api_fence.mode is "off": without --dry-run this is refused`) {
		t.Errorf("dry run with the fence off: exit %d: %s", code, out)
	}
}

// --restore puts the original back (the backup is consumed), and refuses
// when there is none.
func TestInstallKubeconfigRestore(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "scheduler.conf")
	if err := os.WriteFile(kc, []byte(schedulerKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCmd(t, "install-kubeconfig", "--restore", "--kubeconfig", kc, "kube-scheduler.service"); code != exitConfig ||
		!strings.Contains(errOut, "no original kept") {
		t.Errorf("restore without a backup: exit %d stderr %q", code, errOut)
	}
	cfg := gateConfig(t, "gate", filepath.Join(dir, "state"))
	if code, _, errOut := runCmd(t, "install-kubeconfig", "-c", cfg, "--kubeconfig", kc, "kube-scheduler.service"); code != exitOK {
		t.Fatalf("install with mode gate: exit %d: %s", code, errOut)
	}
	if data, _ := os.ReadFile(kc); string(data) == schedulerKubeconfig {
		t.Fatal("install did not change the kubeconfig")
	}
	code, out, errOut := runCmd(t, "install-kubeconfig", "--restore", "--dry-run", "--kubeconfig", kc, "kube-scheduler.service")
	if data, _ := os.ReadFile(kc); code != exitOK || !strings.Contains(out, "dry run") || string(data) == schedulerKubeconfig {
		t.Errorf("restore --dry-run: exit %d %q %q, or it changed the file", code, out, errOut)
	}
	// No configuration needed: -c names a file that does not exist.
	code, out, errOut = runCmd(t, "install-kubeconfig", "--restore", "-c", "/nonexistent/config.toml", "--kubeconfig", kc, "kube-scheduler.service")
	if code != exitOK || !strings.Contains(out, "restored "+kc+" from "+kc+".kha-orig; restart kube-scheduler.service") {
		t.Fatalf("restore: exit %d stdout %q stderr %q", code, out, errOut)
	}
	if data, _ := os.ReadFile(kc); string(data) != schedulerKubeconfig {
		t.Errorf("restored kubeconfig differs from the original:\n%s", data)
	}
	if _, err := os.Stat(kc + ".kha-orig"); !os.IsNotExist(err) {
		t.Errorf("the backup was not consumed: %v", err)
	}
}

// api-fence manifests without --token would print a parameter with no
// token, which refuses every managed write once applied: refused (exit 2);
// --token 0 says so on purpose; --rbac-only prints no parameter.
func TestAPIFenceManifestsNeedsAToken(t *testing.T) {
	for _, args := range [][]string{{"api-fence", "manifests"}, {"api-fence", "manifests", "--webhook"}} {
		code, out, errOut := runCmd(t, args...)
		if code != exitConfig || out != "" || !strings.Contains(errOut, "kha-supervisor: api-fence manifests: --token is required") {
			t.Errorf("%v: exit %d stdout %d bytes stderr %q; want %d and the refusal", args, code, len(out), errOut, exitConfig)
		}
	}
	ca := testCA(t)
	if code, out, errOut := runCmd(t, "api-fence", "manifests", "--token", "0", "--ca-bundle", ca); code != exitOK || strings.Contains(out, "token: \"") {
		t.Errorf("--token 0: exit %d (%s), or a token in the parameter", code, errOut)
	}
	if code, out, _ := runCmd(t, "api-fence", "manifests", "--token", "12", "--ca-bundle", ca); code != exitOK || !strings.Contains(out, `token: "12"`) {
		t.Errorf("--token 12: exit %d, parameter without token 12", code)
	}
	if code, _, errOut := runCmd(t, "api-fence", "manifests", "--rbac-only"); code != exitOK {
		t.Errorf("--rbac-only: exit %d: %s", code, errOut)
	}
}
