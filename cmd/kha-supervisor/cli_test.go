package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cliCase is one command line, its exit code and what its output (stdout
// and stderr together) must contain.
type cliCase struct {
	args []string
	code int
	want []string
}

func runCases(t *testing.T, cases []cliCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			code := dispatch(env{ctx: ctx, stdout: &out, stderr: &out}, tc.args)
			if code != tc.code {
				t.Errorf("$ kha-supervisor %s: exit %d, want %d\n%s", strings.Join(tc.args, " "), code, tc.code, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("$ kha-supervisor %s: output lacks %q:\n%s", strings.Join(tc.args, " "), w, out.String())
				}
			}
		})
	}
}

// unreachableConfig points at an etcd that is not there: a command that
// got past its argument checks would fail with exit 1, not 2.
func unreachableConfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	text := "node = \"m1\"\ncluster = \"test\"\n[etcd]\nendpoints = [\"http://127.0.0.1:9\"]\ndial_timeout = \"200ms\"\nrequest_timeout = \"200ms\"\n"
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCLIArguments: the command lines of issue 9, item 1, each refused
// before anything is read or written, with a message naming the culprit.
func TestCLIArguments(t *testing.T) {
	cfg := unreachableConfig(t)
	runCases(t, []cliCase{
		// A positional argument no longer stops flag parsing.
		{[]string{"handoff", "m1", "--wait", "-c", cfg}, exitConfig, []string{`unexpected argument "m1" for "kha-supervisor handoff"`}},
		{[]string{"ban", "m9", "--for", "1h", "--reason", "disk", "swap", "-c", cfg}, exitConfig, []string{`unexpected argument "swap" for "kha-supervisor ban"`}},
		{[]string{"handoff", "--to", "-c", cfg}, exitConfig, []string{`unexpected argument "` + cfg + `" for "kha-supervisor handoff"`}},
		{[]string{"handoff", "-c", cfg, "--to", "-c"}, exitConfig, []string{`--to: "-c" must be a DNS-1123 name`}},
		{[]string{"status", "extra", "-c", cfg}, exitConfig, []string{`unexpected argument "extra" for "kha-supervisor status"`}},
		{[]string{"run", "extra", "-c", cfg}, exitConfig, []string{`unexpected argument "extra" for "kha-supervisor run"`}},
		{[]string{"guard"}, exitConfig, []string{`"kha-supervisor guard" needs UNIT`}},
		// Unknown commands and flags: exit 2 and a suggestion.
		{[]string{"stauts"}, exitConfig, []string{`unknown command "stauts" for "kha-supervisor"; did you mean status?`}},
		{[]string{"status", "--jsn", "-c", cfg}, exitConfig, []string{"unknown flag: --jsn; did you mean --json?"}},
		{[]string{"drill", "sideways"}, exitConfig, []string{`unknown command "sideways" for "kha-supervisor drill"`}},
		{[]string{"drill"}, exitConfig, []string{"kha-supervisor drill [command]", "failover", "handoff"}},
		// Durations as the configuration wants them.
		{[]string{"ban", "m1", "--for", "10", "-c", cfg}, exitConfig, []string{`invalid argument "10" for "--for" flag: no unit: add a unit, e.g. 2h`}},
		{[]string{"ban", "m1", "--for", "-1h", "-c", cfg}, exitConfig, []string{`invalid argument "-1h" for "--for" flag: must not be negative`}},
		{[]string{"handoff", "--wait", "--timeout", "soon", "-c", cfg}, exitConfig, []string{`invalid argument "soon" for "--timeout" flag: not a duration`}},
		{[]string{"handoff", "--wait", "--timeout", "0", "-c", cfg}, exitConfig, []string{"--timeout must be positive"}},
		{[]string{"drill", "failover", "--timeout", "0s", "-c", cfg}, exitConfig, []string{"--timeout must be positive"}},
		{[]string{"status", "--watch", "--interval", "0", "-c", cfg}, exitConfig, []string{"--interval must be positive"}},
		// Help exits 0 and shows the positional arguments; --version.
		{[]string{"--help"}, exitOK, []string{"Commands for the whole group", "ban ", "status "}},
		{[]string{"ban", "--help"}, exitOK, []string{"kha-supervisor ban NODE [flags]", "--for duration", "--endpoints"}},
		{[]string{"help", "guard"}, exitOK, []string{"kha-supervisor guard UNIT [flags]"}},
		{[]string{"--version"}, exitOK, []string{versionText() + "\n"}},
		{[]string{"version"}, exitOK, []string{versionText() + "\n"}},
		{[]string{}, exitConfig, []string{"Usage:"}},
	})
}

// TestCLINodeNames: node names on the command line follow the
// configuration's rule, checked before etcd is asked (issue 9, item 2).
func TestCLINodeNames(t *testing.T) {
	cfg := unreachableConfig(t)
	const rule = "must be a DNS-1123 name: lower-case letters, digits, '-' and '.'"
	runCases(t, []cliCase{
		{[]string{"ban", "Bad/Name", "-c", cfg}, exitConfig, []string{`kha-supervisor: ban: "Bad/Name" ` + rule}},
		{[]string{"unban", "M1", "-c", cfg}, exitConfig, []string{`kha-supervisor: unban: "M1" ` + rule}},
		{[]string{"handoff", "--to", "m_2", "-c", cfg}, exitConfig, []string{`kha-supervisor: --to: "m_2" ` + rule}},
		{[]string{"drill", "handoff", "--to", "-x-", "-c", cfg}, exitConfig, []string{`kha-supervisor: --to: "-x-" ` + rule}},
		// A valid name gets as far as etcd, which is not there: exit 1.
		{[]string{"ban", "m1.example.org", "-c", cfg}, exitFailure, nil},
	})
}
