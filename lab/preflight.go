package lab

import (
	"fmt"
	"os/exec"
	"strings"
)

// hostCommands are what Up runs on the host: the network plan (ip,
// sysctl), the masters' containers (systemd-nspawn) and the namespaces'
// processes (nsenter, unshare).
var hostCommands = []string{"ip", "sysctl", "systemd-nspawn", "nsenter", "unshare"}

// checkHost refuses an Up that would fail halfway, after the network and
// etcd were built, because a command is missing (a fresh machine without
// `make deps`: "exec: systemd-nspawn: executable file not found" at the
// masters' boot).
func checkHost(lookPath func(string) (string, error)) error {
	var missing []string
	for _, c := range hostCommands {
		if _, err := lookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("lab: %s not found in PATH: run `make deps` (./scripts/deps.sh) first", strings.Join(missing, ", "))
	}
	return nil
}

// checkHostPath is checkHost on this host's PATH.
func checkHostPath() error { return checkHost(exec.LookPath) }
