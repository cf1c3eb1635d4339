package build

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kha-supervisor/kha-supervisor/internal/metricdoc"
	"github.com/kha-supervisor/kha-supervisor/internal/testenv"
)

// The example alert rules, their unit tests and the dashboard shipped in
// the package.
const (
	alertsFile     = "packaging/monitoring/kha-supervisor-alerts.yml"
	alertTestsFile = "packaging/monitoring/kha-supervisor-alerts_test.yml"
	dashboardFile  = "packaging/monitoring/kha-supervisor-dashboard.json"
)

// prometheusOwn are series Prometheus adds per target itself; every other
// name in the examples must be in docs/operations.md's metric table, which
// cmd/kha-supervisor's TestMetricTable holds against the registered metrics.
var prometheusOwn = map[string]bool{"up": true}

func metricTable(t *testing.T) metricdoc.Table {
	t.Helper()
	table, err := metricdoc.Read(filepath.Join(repoRoot(t), metricdoc.File))
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// promtool runs promtool with args in dir; promtool (Debian's prometheus
// package, scripts/deps.sh) is required, not optional.
func promtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	testenv.RequireCommands(t, "promtool")
	cmd := exec.Command("promtool", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

var (
	quoted   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	braces   = regexp.MustCompile(`\{[^}]*\}`)
	ranges   = regexp.MustCompile(`\[[^\]]*\]`)
	grouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	ident    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
)

// selectorNames returns the metric names a PromQL expression selects: the
// identifiers left once strings, label matchers, ranges and grouping lists
// are gone that are neither functions, keywords nor parts of numbers or
// durations. promtool checks the syntax.
func selectorNames(expr string) []string {
	s := quoted.ReplaceAllString(expr, `""`)
	s = braces.ReplaceAllString(s, " ")
	s = ranges.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range ident.FindAllStringIndex(s, -1) {
		name, rest := s[loc[0]:loc[1]], strings.TrimLeft(s[loc[1]:], " \t\n")
		switch {
		case keywords[strings.ToLower(name)], strings.HasPrefix(rest, "("):
		case loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.'):
		default:
			out = append(out, name)
		}
	}
	return out
}

func TestSelectorNames(t *testing.T) {
	got := selectorNames(`group by (cluster) (last_over_time(kha_role{role="active",x="}"}[15m]) unless on (instance, job) up)
		* on (instance) group_left (cluster) kha_build_info offset 5m > 1e3 and sum(rate(kha_renew_duration_seconds_bucket[$__rate_interval]))`)
	want := []string{"kha_role", "up", "kha_build_info", "kha_renew_duration_seconds_bucket"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("selectorNames = %v, want %v", got, want)
	}
}

// checkNames reports names of expr that are neither documented nor
// Prometheus' own, and returns the documented ones.
func checkNames(t *testing.T, table metricdoc.Table, where, expr string) []string {
	t.Helper()
	names := selectorNames(expr)
	if len(names) == 0 {
		t.Errorf("%s: %q selects no metric", where, expr)
	}
	for _, n := range names {
		if _, ok := table.Lookup(n); !ok && !prometheusOwn[n] {
			t.Errorf("%s uses %s, which %s does not document (and the daemon does not export)", where, n, metricdoc.File)
		}
	}
	return names
}

type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert, Record, Expr, For string
			Labels, Annotations      map[string]string
		}
	}
}

// TestAlertRules checks the example rules with `promtool check rules`,
// replays the recorded series of kha-supervisor-alerts_test.yml through them
// (`promtool test rules`), and checks that they cover what issues 9 and 18
// ask for with metric names the daemon really exports.
func TestAlertRules(t *testing.T) {
	root := repoRoot(t)
	promtool(t, filepath.Join(root, "packaging/monitoring"), "check", "rules", filepath.Base(alertsFile))
	promtool(t, filepath.Join(root, "packaging/monitoring"), "test", "rules", filepath.Base(alertTestsFile))
	b, err := os.ReadFile(filepath.Join(root, alertsFile))
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	tests, err := os.ReadFile(filepath.Join(root, alertTestsFile))
	if err != nil {
		t.Fatal(err)
	}
	table := metricTable(t)
	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("%s: rule %q is not an alert", alertsFile, r.Record)
				continue
			}
			alerts[r.Alert] = true
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("%s: %s lacks a severity or a summary", alertsFile, r.Alert)
			}
			checkNames(t, table, alertsFile+": "+r.Alert, r.Expr)
			if !strings.Contains(string(tests), "alertname: "+r.Alert+",") && !strings.Contains(string(tests), "alertname: "+r.Alert+"\n") {
				t.Errorf("%s: %s is not replayed in %s", alertsFile, r.Alert, alertTestsFile)
			}
		}
	}
	for _, want := range []string{"KhaSupervisorFenced", "KhaNoLeader", "KhaTwoLeaders", "KhaRenewalFailures", "KhaDropinMismatch",
		"KhaStrayProcess", "KhaMemberDown", "KhaNoEligibleStandby", "KhaMissingPeers", "KhaConfigMismatch",
		"KhaAPIFenceTokenMismatch", "KhaHealthProbeFailing", "KhaAPIFenceOff", "KhaAPIFenceUnlistedAPIServer"} {
		if !alerts[want] {
			t.Errorf("%s has no %s alert", alertsFile, want)
		}
	}
}

// TestDashboard checks the example Grafana dashboard: valid JSON, every
// query valid PromQL (promtool checks them as recording rules) selecting
// documented metrics of the chosen group, and every kha_ metric shown.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title, UID string
		Panels     []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no title, uid or panels", dashboardFile)
	}
	// Grafana's own variables and the dashboard's, as Grafana substitutes them.
	vars := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "6h", "$cluster", "cp", "$prefix", "/kha-supervisor")
	table := metricTable(t)
	used := map[string]bool{}
	rules := "groups:\n  - name: dashboard\n    rules:\n"
	for i, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", dashboardFile, p.Title)
		}
		for j, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `cluster="$cluster"`) || !strings.Contains(tg.Expr, `prefix="$prefix"`) {
				t.Errorf("%s: panel %q: %q does not select the dashboard's group (cluster=\"$cluster\", prefix=\"$prefix\")", dashboardFile, p.Title, tg.Expr)
			}
			expr := vars.Replace(tg.Expr)
			for _, n := range checkNames(t, table, dashboardFile+": "+p.Title, expr) {
				used[n] = true
			}
			q, _ := json.Marshal(expr) // a JSON string is a YAML string
			rules += fmt.Sprintf("      - record: panel_%d_%d\n        expr: %s\n", i, j, q)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard-rules.yml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "check", "rules", "dashboard-rules.yml")
	var missing []string
	for _, r := range table {
		for _, n := range r.Names {
			if !strings.HasPrefix(n, "kha_") {
				continue
			}
			if !used[n] && !used[n+"_bucket"] {
				missing = append(missing, n)
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%s shows nothing of %s", dashboardFile, strings.Join(missing, ", "))
	}
}
