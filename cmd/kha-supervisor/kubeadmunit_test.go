package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKubeadmUnitPrintsTheUnit(t *testing.T) {
	code, out, errOut := runCmd(t, "kubeadm-unit", "--bin-dir", "/opt/k8s/bin", "../../packaging/staticpod/testdata/kube-scheduler.yaml")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "ExecStart=/opt/k8s/bin/kube-scheduler \\\n") || !strings.Contains(out, "--leader-elect=false") {
		t.Errorf("unit:\n%s", out)
	}
	if strings.Contains(out, "kube-scheduler.service: move ") {
		t.Errorf("notes on standard output, where the unit goes:\n%s", out)
	}
	if !strings.Contains(errOut, "kube-scheduler.service: move ") {
		t.Errorf("notes: %s", errOut)
	}
}

func TestKubeadmUnitRefusals(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "apiserver.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    command: [kube-apiserver]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no manifest":  {[]string{"kubeadm-unit"}, "needs MANIFEST"},
		"missing file": {[]string{"kubeadm-unit", "/nonexistent/m.yaml"}, "/nonexistent/m.yaml"},
		"apiserver":    {[]string{"kubeadm-unit", bad}, bad + `: command "kube-apiserver" is neither`},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		if code != exitConfig || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d naming %q and no unit", name, code, out, errOut, exitConfig, tc.want)
		}
	}
}
