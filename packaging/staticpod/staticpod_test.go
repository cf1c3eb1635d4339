package staticpod

import (
	"os"
	"strings"
	"testing"
)

func convertFile(t *testing.T, name string) Unit {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	u, err := Convert(name, b, Options{})
	if err != nil {
		t.Fatalf("Convert(%s): %v", name, err)
	}
	return u
}

func TestSchedulerUnit(t *testing.T) {
	u := convertFile(t, "kube-scheduler.yaml")
	if u.Name != "kube-scheduler.service" {
		t.Errorf("name %q", u.Name)
	}
	for _, want := range []string{
		"ExecStart=/usr/local/bin/kube-scheduler \\\n\t--authentication-kubeconfig=/etc/kubernetes/scheduler.conf",
		"\t--leader-elect=false\n",
		"SuccessExitStatus=1\n",
		"Restart=on-failure\n",
	} {
		if !strings.Contains(u.Text, want) {
			t.Errorf("unit lacks %q:\n%s", want, u.Text)
		}
	}
	if strings.Contains(u.Text, "--leader-elect=true") {
		t.Errorf("unit keeps the component's own election:\n%s", u.Text)
	}
	notes := strings.Join(u.Notes, "\n")
	for _, want := range []string{"replaced --leader-elect=true", "registry.k8s.io/kube-scheduler:v1.37.2", `probes = ["kube-scheduler.service=https://127.0.0.1:10259/livez"]`, "install-dropins"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

func TestControllerManagerUnit(t *testing.T) {
	u := convertFile(t, "kube-controller-manager.yaml")
	if strings.Contains(u.Text, "SuccessExitStatus") {
		t.Errorf("controller-manager dies of SIGTERM, which systemd counts as clean; SuccessExitStatus=1 would hide a real exit 1:\n%s", u.Text)
	}
	if strings.Contains(u.Text, "--leader-elect-lease-duration") {
		t.Errorf("election tuning kept without the election:\n%s", u.Text)
	}
	// '*' needs no quoting, but the unit must keep the list intact.
	if !strings.Contains(u.Text, "\t--controllers=*,bootstrapsigner,tokencleaner \\\n") {
		t.Errorf("controllers flag changed:\n%s", u.Text)
	}
}

func TestConvertRefuses(t *testing.T) {
	sched, err := os.ReadFile("testdata/kube-scheduler.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(sched)
	for name, tc := range map[string]struct{ manifest, want string }{
		"not yaml":      {"{", "not a pod manifest"},
		"deployment":    {"apiVersion: apps/v1\nkind: Deployment\n", `kind "Deployment"`},
		"apiserver":     {strings.Replace(s, "- kube-scheduler\n", "- kube-apiserver\n", 1), "neither kube-scheduler nor kube-controller-manager"},
		"moved mount":   {strings.Replace(s, "mountPath: /etc/kubernetes/scheduler.conf", "mountPath: /etc/k/s.conf", 1), `volume "kubeconfig" is host path /etc/kubernetes/scheduler.conf mounted at /etc/k/s.conf`},
		"missing vol":   {strings.Replace(s, "name: kubeconfig\n      readOnly", "name: other\n      readOnly", 1), `volumeMount "other" names no volume`},
		"secret env":    {strings.Replace(s, "    name: kube-scheduler\n", "    name: kube-scheduler\n    env:\n    - name: TOKEN\n      valueFrom: {secretKeyRef: {name: a, key: b}}\n", 1), "env TOKEN takes its value from the API"},
		"no containers": {"apiVersion: v1\nkind: Pod\nspec: {containers: []}\n", "0 containers"},
	} {
		_, err := Convert("m.yaml", []byte(tc.manifest), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", name, err, tc.want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "m.yaml: ") {
			t.Errorf("%s: error does not name the manifest: %v", name, err)
		}
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"--a=b":         "--a=b",
		"--a=b c":       `"--a=b c"`,
		`--a="x"`:       `"--a=\"x\""`,
		"--v=%h":        "--v=%%h",
		"--v=$HOME":     "--v=$$HOME",
		`--p=C:\dir`:    `"--p=C:\\dir"`,
		"--feature=a;b": `"--feature=a;b"`,
	} {
		if got := quote(in); got != want {
			t.Errorf("quote(%q) = %q, want %q", in, got, want)
		}
	}
}
