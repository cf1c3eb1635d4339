package main

import (
	pathpkg "path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kha-supervisor/kha-supervisor/daemon"
	"github.com/kha-supervisor/kha-supervisor/internal/metricdoc"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
	"github.com/kha-supervisor/kha-supervisor/supervisor/health"
	"github.com/kha-supervisor/kha-supervisor/supervisor/httpapi"
)

// descRecorder is a Registerer that keeps what each collector describes:
// every metric the daemon can export, whether it has a sample now or not.
type descRecorder struct{ descs []*prometheus.Desc }

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		r.descs = append(r.descs, d)
	}
	return nil
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *descRecorder) Unregister(prometheus.Collector) bool { return false }

// Desc has no accessors; its String() is the one way to its name and labels.
var descRe = regexp.MustCompile(`^Desc\{fqName: "([^"]+)", .*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// registered is what `run` registers, through the group labels as there:
// metric name -> its variable labels, and the constant labels of each.
func registered(t *testing.T) (vars map[string][]string, consts map[string]string) {
	t.Helper()
	rec := &descRecorder{}
	reg := httpapi.WithGroupLabels(rec, "kube-control-plane", "/kha-supervisor")
	cfg := config.Default()
	if _, err := httpapi.NewMetrics(reg, httpapi.WithUnits(cfg.Units.Managed...), httpapi.WithEndpoints(cfg.Etcd.Endpoints...)); err != nil {
		t.Fatal(err)
	}
	if _, err := httpapi.NewGroupMetrics(reg); err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(health.NewCollector(nil), daemon.DescribeAPIFence(config.APIFenceToken))
	vars, consts = map[string][]string{}, map[string]string{}
	for _, d := range rec.descs {
		m := descRe.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read %s", d)
		}
		var labels []string
		if m[3] != "" {
			labels = strings.Split(m[3], ",")
		}
		vars[m[1]], consts[m[1]] = labels, m[2]
	}
	return vars, consts
}

// TestMetricTable holds docs/operations.md's metric table against the
// metrics the daemon registers, both ways: every kha_ metric is in the table
// with its labels, every row names registered metrics, and every other
// registered name matches a documented pattern (go_*, process_*).
func TestMetricTable(t *testing.T) {
	table, err := metricdoc.Read("../../" + metricdoc.File)
	if err != nil {
		t.Fatal(err)
	}
	vars, consts := registered(t)
	for name, labels := range vars {
		row, ok := table.Lookup(name)
		switch {
		case !ok:
			t.Errorf("%s: the metric table lacks %s", metricdoc.File, name)
		case strings.HasPrefix(name, "kha_") && !equalSets(row.Labels, labels):
			t.Errorf("%s:%d: %s has labels %v, the table says %v", metricdoc.File, row.Line, name, labels, row.Labels)
		}
		for _, want := range []string{`cluster="kube-control-plane"`, `prefix="/kha-supervisor"`} {
			if !slices.Contains(strings.Split(consts[name], ","), want) {
				t.Errorf("%s carries the constant labels {%s}, without %s", name, consts[name], want)
			}
		}
	}
	for _, row := range table {
		for _, n := range row.Names {
			if !documentedRegistered(n, vars) {
				t.Errorf("%s:%d: %s is documented but not registered", metricdoc.File, row.Line, n)
			}
		}
	}
}

// documentedRegistered: the name is registered, or the pattern matches a
// registered name.
func documentedRegistered(n string, vars map[string][]string) bool {
	if _, ok := vars[n]; ok {
		return true
	}
	for reg := range vars {
		if ok, _ := pathpkg.Match(n, reg); ok && strings.ContainsAny(n, "*?[") {
			return true
		}
	}
	return false
}

func equalSets(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
