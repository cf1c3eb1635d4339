package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/kha-supervisor/kha-supervisor/apifence"
	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
	"github.com/kha-supervisor/kha-supervisor/group"
)

// testCA is a fresh node gate CA's certificate file.
func testCA(t *testing.T) string {
	t.Helper()
	ca, err := localca.Open(filepath.Join(t.TempDir(), "state"))
	if err != nil {
		t.Fatal(err)
	}
	return localca.CertFile(ca.Dir)
}

// api-fence ca prints the node's gate CA, creating it when missing, and
// prints the same one the next time.
func TestAPIFenceCAPrintsTheNodesCA(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	cfg := writeConfig(t, "node = \"m1\"\n[api_fence]\nstate_dir = \""+state+"\"\n")
	code, first, errOut := runCmd(t, "api-fence", "ca", "-c", cfg)
	if code != exitOK || !strings.HasPrefix(first, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, first, errOut)
	}
	if b, err := os.ReadFile(localca.CertFile(state)); err != nil || string(b) != first {
		t.Errorf("printed CA differs from %s (%v)", localca.CertFile(state), err)
	}
	if _, again, _ := runCmd(t, "api-fence", "ca", "-c", cfg); again != first {
		t.Error("a second api-fence ca printed another CA")
	}
	if code, _, _ := runCmd(t, "api-fence", "ca", "-c", filepath.Join(t.TempDir(), "none.toml")); code != exitConfig {
		t.Errorf("missing config: exit %d, want %d", code, exitConfig)
	}
}

// TestAPIFenceManifestsWebhook: --webhook prints RBAC, the parameter and
// the ValidatingWebhookConfiguration with every given node's CA and the
// URL, and no policy; bad flags exit with the configuration code.
func TestAPIFenceManifestsWebhook(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for _, n := range []string{"m1", "m2"} {
		ca, err := localca.Open(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, localca.CertFile(ca.Dir))
	}
	code, out, errOut := runCmd(t, "api-fence", "manifests", "--token", "0", "--webhook", "--webhook-url", "https://127.0.0.1:17000/validate",
		"--ca-bundle", files[0], "--ca-bundle", files[1])
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"kind: ValidatingWebhookConfiguration", "url: https://127.0.0.1:17000/validate", "failurePolicy: Fail",
		"sideEffects: None", "name: " + apifence.WebhookName, "kind: ConfigMap", "kind: ClusterRole", "kind: RoleBinding", "'*/*'"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "ValidatingAdmissionPolicy") {
		t.Error("the webhook variant prints a ValidatingAdmissionPolicy (not served before 1.30)")
	}
	var bundle []byte
	for _, doc := range strings.Split(out, "\n---\n") {
		var o struct {
			Kind     string `json:"kind"`
			Webhooks []struct {
				ClientConfig struct {
					CABundle []byte `json:"caBundle"`
				} `json:"clientConfig"`
			} `json:"webhooks"`
		}
		if yaml.Unmarshal([]byte(doc), &o) == nil && o.Kind == "ValidatingWebhookConfiguration" {
			bundle = o.Webhooks[0].ClientConfig.CABundle
		}
	}
	for _, f := range files {
		pem, _ := os.ReadFile(f)
		if !bytes.Contains(bundle, pem) {
			t.Errorf("caBundle lacks %s", f)
		}
	}
	for name, args := range map[string][]string{
		"missing CA file": {"--ca-bundle", filepath.Join(dir, "none.crt")},
		"not PEM":         {"--ca-bundle", writeTemp(t, dir, "bad.crt", "hello")},
		"http URL":        {"--ca-bundle", files[0], "--webhook-url", "http://127.0.0.1:1/validate"},
	} {
		if code, _, _ := runCmd(t, append([]string{"api-fence", "manifests", "--token", "0", "--webhook"}, args...)...); code != exitConfig {
			t.Errorf("%s: exit %d, want %d", name, code, exitConfig)
		}
	}
}

func writeTemp(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAPIFenceClusterLine: the cluster table's line, from the records.
func TestAPIFenceClusterLine(t *testing.T) {
	at := time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC)
	rec := func(node, mode string, token int64) group.Record {
		r := group.Record{Node: node}
		if mode != "" {
			r.APIFence = &group.APIFence{Mode: mode, Token: token}
		}
		return r
	}
	lead := rec("m1", "token", 101)
	lead.APIFence.Published, lead.APIFence.PublishedAt, lead.APIFence.TookMS = 101, at, 250
	unfenced := rec("m1", "token", 101)
	unfenced.APIFence.Unfenced, unfenced.APIFence.Unlisted = []string{"https://10.0.0.2:6443"}, []string{"10.0.0.3 (in the endpoints of service default/kubernetes)"}
	for name, c := range map[string]struct {
		cs   group.ClusterStatus
		want []string
		none bool
	}{
		"off everywhere": {cs: group.ClusterStatus{Leader: "m1", Token: 101, Members: []group.Record{rec("m1", "", 0), rec("m2", "", 0)}}, none: true},
		"held by the leader": {cs: group.ClusterStatus{Leader: "m1", Token: 101, Members: []group.Record{lead, rec("m2", "token", 101)}},
			want: []string{"leader's mode token", "hold token 101, the leader's", "in 250 ms"}},
		"the fence off somewhere": {cs: group.ClusterStatus{Leader: "m1", Token: 101, Members: []group.Record{unfenced, rec("m2", "token", 101)}},
			want: []string{"FENCE OFF: a stale token was admitted by https://10.0.0.2:6443", "apiservers not in api_fence.apiservers (promotions fail): 10.0.0.3"}},
		"mismatch and a member off": {cs: group.ClusterStatus{Leader: "m2", Token: 102, Members: []group.Record{lead, rec("m2", "token", 101), rec("m3", "", 0)}},
			want: []string{"hold token 101, the leader's is 102: MISMATCH", "members differ in api_fence.mode (off: m3; token: m1,m2)"}},
	} {
		got := apiFenceClusterLine(c.cs)
		if c.none != (got == "") {
			t.Errorf("%s: %q", name, got)
		}
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", name, got, w)
			}
		}
	}
}
