package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The documentation that describes the command line is generated from the
// command tree itself, so that it cannot drift from the CLI: the shell
// completions, the command sections of kha-supervisor(8) (the rest of the
// page is hand-written in packaging/man/kha-supervisor.8.in) and README's
// command and exit-code tables. `go generate ./cmd/kha-supervisor` runs
// `kha-supervisor gen-docs ../..`; a test fails when a checked-in file is
// not what this would write.

func init() { register(genDocsCommand) }

func genDocsCommand(e env) *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs REPO",
		Short:  "regenerate the completions, the man page's command sections and README's tables",
		Hidden: true,
		Args:   exactArgs("REPO"),
		RunE: func(c *cobra.Command, args []string) error {
			files, err := generatedDocs(args[0])
			if err != nil {
				return exit(fail(e, exitFailure, "gen-docs: %v", err))
			}
			for _, f := range files {
				if err := os.WriteFile(filepath.Join(args[0], f.path), f.data, 0o644); err != nil {
					return exit(fail(e, exitFailure, "gen-docs: %v", err))
				}
				fmt.Fprintln(e.stdout, "wrote", f.path)
			}
			return nil
		},
	}
}

// genFile is one generated file, relative to the repository root.
type genFile struct {
	path string
	data []byte
}

// Paths of the generated files and of the sources they are made from.
const (
	manTemplate = "packaging/man/kha-supervisor.8.in"
	manPage     = "packaging/man/kha-supervisor.8"
	readme      = "README.md"
)

// generatedDocs renders every generated file from a fresh command tree and
// the sources under repo.
func generatedDocs(repo string) ([]genFile, error) {
	root := newRoot(env{stdout: io.Discard, stderr: io.Discard})
	var files []genFile
	for _, sh := range []struct {
		path string
		gen  func(io.Writer) error
	}{
		{"packaging/completion/kha-supervisor.bash", func(w io.Writer) error { return root.GenBashCompletionV2(w, true) }},
		{"packaging/completion/kha-supervisor.zsh", root.GenZshCompletion},
		{"packaging/completion/kha-supervisor.fish", func(w io.Writer) error { return root.GenFishCompletion(w, true) }},
	} {
		var b bytes.Buffer
		if err := sh.gen(&b); err != nil {
			return nil, err
		}
		files = append(files, genFile{sh.path, b.Bytes()})
	}
	tmpl, err := os.ReadFile(filepath.Join(repo, manTemplate))
	if err != nil {
		return nil, err
	}
	man, err := renderMan(root, string(tmpl))
	if err != nil {
		return nil, err
	}
	files = append(files, genFile{manPage, []byte(man)})
	rd, err := os.ReadFile(filepath.Join(repo, readme))
	if err != nil {
		return nil, err
	}
	text, err := replaceBlock(string(rd), "commands", readmeCommands(root))
	if err == nil {
		text, err = replaceBlock(text, "exit-codes", readmeExitCodes())
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", readme, err)
	}
	return append(files, genFile{readme, []byte(text)}), nil
}

// documented lists the commands the docs describe, parents before their
// subcommands, in the order of the help's groups.
func documented(root *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		out = append(out, c)
		for _, s := range c.Commands() {
			if s.IsAvailableCommand() || s.Name() == "help" {
				walk(s)
			}
		}
	}
	for _, g := range append(root.Groups(), &cobra.Group{ID: ""}) {
		for _, c := range root.Commands() {
			if c.GroupID == g.ID && (c.IsAvailableCommand() || c.Name() == "help") {
				walk(c)
			}
		}
	}
	return out
}

// path is the command line of c without the program name: "drill handoff".
func path(c *cobra.Command) string {
	return strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
}

// args is the positional part of c's Use: "NODE".
func args(c *cobra.Command) string {
	f := strings.Fields(c.Use)
	return strings.Join(f[1:], " ")
}

// ownFlags are c's flags that the common sections do not describe.
func ownFlags(c *cobra.Command) []*pflag.Flag {
	var out []*pflag.Flag
	c.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" && !isClientFlag(f.Name) {
			out = append(out, f)
		}
	})
	return out
}

// listsAsOne reports a command whose subcommands the tables list as one
// row: a command that only groups them, and completion (runnable only to
// refuse a shell it does not know).
func listsAsOne(c *cobra.Command) bool {
	return c.HasSubCommands() && (!c.Runnable() || c.Name() == "completion")
}

func isClientFlag(name string) bool {
	for _, x := range clientOptionEnv() {
		if x.flag == name {
			return true
		}
	}
	return false
}

// flagSyntax is "--for duration" (name and value, as in the help).
func flagSyntax(f *pflag.Flag) (name, value string) {
	value, _ = pflag.UnquoteUsage(f)
	if value == "bool" {
		value = ""
	}
	return "--" + f.Name, value
}

func flagUsage(f *pflag.Flag) string {
	_, usage := pflag.UnquoteUsage(f)
	switch f.DefValue {
	case "", "false", "0", "0s", "[]":
	default:
		if f.Name != "config" {
			usage += " (default " + f.DefValue + ")"
		}
	}
	return usage
}

// replaceBlock replaces the lines between the markers of block name.
func replaceBlock(text, name, body string) (string, error) {
	begin := "<!-- BEGIN " + name + ": generated by `go generate ./cmd/kha-supervisor` -->\n"
	end := "<!-- END " + name + " -->"
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("no block %q (%q ... %q)", name, begin, end)
	}
	return text[:i+len(begin)] + body + text[j:], nil
}

func readmeCommands(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString("| command | what |\n|---|---|\n")
	for _, c := range documented(root) {
		if p := c.Parent(); c.HasSubCommands() || c.Name() == "help" || p != nil && listsAsOne(p) {
			if listsAsOne(c) {
				fmt.Fprintf(&b, "| `%s %s` | %s |\n", path(c), subNames(c), c.Short)
			}
			continue
		}
		line := path(c)
		if a := args(c); a != "" {
			line += " " + a
		}
		for _, f := range ownFlags(c) {
			n, v := flagSyntax(f)
			if v != "" {
				n += " " + strings.ToUpper(v)
			}
			line += " [" + n + "]"
		}
		if c.Annotations["client"] != "" {
			line += " [client options]"
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", strings.ReplaceAll(line, "|", `\|`), c.Short)
	}
	b.WriteString("\nClient options (etcdctl's names; each also from an environment variable): ")
	var opts []string
	for _, x := range clientOptionEnv() {
		opts = append(opts, "`--"+x.flag+"` (`"+x.env+"`)")
	}
	b.WriteString(strings.Join(opts, ", ") + ". They override the configuration file, which a client command then does not need.\n")
	return b.String()
}

func readmeExitCodes() string {
	var b strings.Builder
	b.WriteString("| code | meaning |\n|---|---|\n")
	for _, x := range exitCodes {
		fmt.Fprintf(&b, "| %d | %s |\n", x.code, x.text)
	}
	return b.String()
}

// subNames is "bash\\|fish\\|zsh" for a table cell.
func subNames(c *cobra.Command) string {
	var ns []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			ns = append(ns, s.Name())
		}
	}
	return strings.Join(ns, `\|`)
}
