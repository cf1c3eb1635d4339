package fencing

import (
	"strings"
	"testing"
	"time"
)

func goodBinding() Binding {
	return Binding{
		Unit: "kube-scheduler.service", BindsTo: []string{"kha-supervisor.service"},
		After:        []string{"network.target", "kha-supervisor.service"},
		ExecStartPre: [][]string{{"/usr/libexec/kha-supervisor/kha-guard", "kube-scheduler.service"}},
		TimeoutStop:  2 * time.Second, KillMode: "control-group", SendSIGKILL: true,
	}
}

func TestBindingProblems(t *testing.T) {
	const sup = "kha-supervisor.service"
	cases := []struct {
		name  string
		tweak func(*Binding)
		want  string // substring of the one problem; "" = none
	}{
		{"packaged drop-in", func(*Binding) {}, ""},
		{"shorter stop timeout", func(b *Binding) { b.TimeoutStop = time.Second }, ""},
		{"the subcommand, as drop-ins before kha-guard ran it", func(b *Binding) {
			b.ExecStartPre = [][]string{{"/usr/bin/kha-supervisor", "guard", "kube-scheduler.service"}}
		}, ""},
		{"kha-guard elsewhere", func(b *Binding) {
			b.ExecStartPre = [][]string{{"/bin/true"}, {"/opt/kha/kha-guard", "-c", "/etc/x.toml", "%n"}}
		}, ""},
		{"guard not installed", func(b *Binding) { b.Missing = []string{"/usr/libexec/kha-supervisor/kha-guard"} }, "runs the guard /usr/libexec/kha-supervisor/kha-guard, which is not installed"},
		{"another program missing", func(b *Binding) {
			b.ExecStartPre = append(b.ExecStartPre, []string{"/opt/x/prep"})
			b.Missing = []string{"/opt/x/prep"}
		}, ""},
		{"kha-guard without a unit", func(b *Binding) { b.ExecStartPre = [][]string{{"/usr/libexec/kha-supervisor/kha-guard"}} }, "ExecStartPre"},
		{"guard elsewhere on the line", func(b *Binding) {
			b.ExecStartPre = [][]string{{"/bin/true"}, {"/opt/bin/kha-supervisor", "-c", "/etc/x.toml", "guard", "%n"}}
		}, ""},
		{"no BindsTo", func(b *Binding) { b.BindsTo = nil }, "BindsTo does not include kha-supervisor.service"},
		{"no After", func(b *Binding) { b.After = []string{"network.target"} }, "After does not include"},
		{"guard reset by a later drop-in", func(b *Binding) { b.ExecStartPre = nil }, "ExecStartPre has no guard (kha-guard UNIT;"},
		{"other program named guard", func(b *Binding) { b.ExecStartPre = [][]string{{"/usr/bin/guard", "kha-supervisor"}} }, "ExecStartPre"},
		{"long stop timeout", func(b *Binding) { b.TimeoutStop = 90 * time.Second }, "TimeoutStopUSec is 1m30s, longer than units.stop_timeout 2s"},
		{"infinite stop timeout", func(b *Binding) { b.TimeoutStop = 0 }, "TimeoutStopUSec is infinite"},
		{"kill mode", func(b *Binding) { b.KillMode = "process" }, `KillMode is "process"`},
		{"no SIGKILL", func(b *Binding) { b.SendSIGKILL = false }, "SendSIGKILL is no"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := goodBinding()
			c.tweak(&b)
			got := b.Problems(sup, 2*time.Second)
			switch {
			case c.want == "" && len(got) > 0:
				t.Fatalf("problems %q, want none", got)
			case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want)):
				t.Fatalf("problems %q, want one containing %q", got, c.want)
			case c.want != "" && (!strings.Contains(got[0], b.Unit) || !strings.Contains(got[0], FixCommand)):
				t.Fatalf("problem %q does not name the unit and the fix", got[0])
			}
		})
	}
}
