package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// codeError carries a command's exit code out of cobra; the command has
// already printed why.
type codeError int

func (c codeError) Error() string { return "exit status " + strconv.Itoa(int(c)) }

// exit turns a command's exit code into what cobra's RunE returns.
func exit(code int) error {
	if code == exitOK {
		return nil
	}
	return codeError(code)
}

func defaultConfigPath() string { return config.DefaultPath }

// noArgs refuses any positional argument, naming it: `status extra` must not
// silently run `status`.
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		if c.HasSubCommands() {
			return unknownCommand(c, args[0])
		}
		return fmt.Errorf("unexpected argument %q for %q (it takes no arguments)", args[0], c.CommandPath())
	}
	return nil
}

// exactArgs wants exactly the positional arguments that Use names.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		switch {
		case len(args) < len(names):
			return fmt.Errorf("%q needs %s (usage: %s)", c.CommandPath(), strings.Join(names[len(args):], " "), c.UseLine())
		case len(args) > len(names):
			return fmt.Errorf("unexpected argument %q for %q (usage: %s)", args[len(names)], c.CommandPath(), c.UseLine())
		}
		return nil
	}
}

// unknownCommand is cobra's message with its suggestions.
func unknownCommand(c *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, c.CommandPath())
	if s := c.SuggestionsFor(name); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return fmt.Errorf("%s", msg)
}

var unknownFlagRe = regexp.MustCompile(`^unknown (?:shorthand )?flag: '?-*([^' ]+)'?`)

// flagError adds "did you mean" to pflag's unknown-flag errors, which
// cobra leaves without suggestions.
func flagError(c *cobra.Command, err error) error {
	m := unknownFlagRe.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	var best []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		if d := config.EditDistance(m[1], f.Name); d <= 2 || strings.HasPrefix(f.Name, m[1]) {
			best = append(best, "--"+f.Name)
		}
	})
	if len(best) > 0 {
		return fmt.Errorf("%w; did you mean %s?", err, strings.Join(best, " or "))
	}
	return err
}

// durationValue is a pflag duration with the configuration's rules: a Go
// duration with a unit, never negative, and a hint when the unit is missing.
type durationValue struct{ d *time.Duration }

func durationFlag(fs *pflag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	d := def
	fs.Var(durationValue{&d}, name, usage)
	return &d
}

func (v durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return "0" // what pflag takes for "no default" in the help
	}
	return v.d.String()
}

func (v durationValue) Type() string { return "duration" }

func (v durationValue) Set(s string) error {
	if _, err := strconv.ParseFloat(s, 64); err == nil && s != "0" {
		return fmt.Errorf("no unit: add a unit, e.g. 2h, 30m or 90s")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a duration: want a Go duration such as \"90s\", \"10m\" or \"2h\"")
	}
	if d < 0 {
		return fmt.Errorf("must not be negative")
	}
	*v.d = d
	return nil
}
