package config

import (
	"fmt"
)

// This file serves the operator commands (status, history, handoff,
// freeze, ban, drill): they only talk to etcd, so they read and check only
// what that needs. A daemon-only key (http.listen, hooks, timing) the daemon
// would refuse must not stop an operator from seeing the group.

// clientRules are the checks of the keys an etcd client uses.
var clientRules = []rule{checkNames, checkEtcd, checkTLSFiles, checkPasswordFile}

// LoadClient reads path as strictly as Load (syntax, unknown keys, types)
// but validates only the node and cluster names and the etcd section.
func LoadClient(path string) (Config, error) {
	d, cfg, _, err := readDocument(path)
	if err != nil {
		return Config{}, err
	}
	return cfg, cfg.checkWith(d, clientRules)
}

// ValidateClient is LoadClient's validation, for a configuration that
// command-line flags changed after loading.
func (c Config) ValidateClient() error { return c.checkWith(nil, clientRules) }

// CheckName applies the rule for node and cluster names (DNS-1123) to a
// name given elsewhere, such as on a command line.
func CheckName(s string) error {
	if msg := nameProblem(s); msg != "" {
		return fmt.Errorf("%q %s", s, msg)
	}
	return nil
}

// checkWith runs the given rules as check runs all of them.
func (c Config) checkWith(d *document, rs []rule) error {
	file := c.Path
	if d != nil {
		file = d.file
	}
	if file == "" {
		file = "(command line)"
	}
	for _, r := range rs {
		if e := r(c); e != nil {
			e.File = file
			if e.Line == 0 && d != nil {
				e.Line = d.lineOf(e.Key)
			}
			return e
		}
	}
	return nil
}
