package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kha-supervisor/kha-supervisor/apifence/localca"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

func init() { register(installKubeconfigCommand) }

func installKubeconfigCommand(e env) *cobra.Command {
	var path string
	var dry, restore bool
	c := &cobra.Command{
		Use:     "install-kubeconfig UNIT",
		GroupID: groupNode,
		Short:   "point a managed unit's kubeconfig at its API gate (api_fence.gates)",
		Long: `Rewrite UNIT's kubeconfig so that its current context's cluster is the unit's API gate: the gate's loopback address (api_fence.gates) as server and the node's gate CA (in api_fence.state_dir, created if missing) as certificate authority. The unit's own credential is kept: the gate authenticates it as the API server would.
Prints each change; the original is kept once as FILE.kha-orig. Restart the unit to use it.
Refused (exit 2) while api_fence.mode is "off": nothing would serve the gate, and the unit could not reach its API server after its next restart. Set the mode, restart kha-supervisor, then run this.
With --restore: put FILE.kha-orig back as FILE (the backup is consumed, so a later install keeps the kubeconfig of that time); it needs no configuration file. Restart the unit to use it.`,
		Args: exactArgs("UNIT"),
		ValidArgsFunction: func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return config.Default().Units.Managed, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			if restore {
				return exit(restoreKubeconfig(e, args[0], path, dry))
			}
			return exit(installKubeconfig(e, nodeConfigPath(e, c), args[0], path, dry))
		},
	}
	c.Flags().StringVar(&path, "kubeconfig", "", "the unit's kubeconfig `file` (default: kubeadm's file for kube-scheduler and kube-controller-manager)")
	c.Flags().BoolVar(&dry, "dry-run", false, "print the changes and the new kubeconfig; write nothing")
	c.Flags().BoolVar(&restore, "restore", false, "put back the original kubeconfig kept as FILE.kha-orig")
	_ = c.MarkFlagFilename("kubeconfig")
	return c
}

// kubeadmKubeconfigs are where kubeadm writes the components' kubeconfigs.
var kubeadmKubeconfigs = map[string]string{
	"kube-scheduler.service":          "/etc/kubernetes/scheduler.conf",
	"kube-controller-manager.service": "/etc/kubernetes/controller-manager.conf",
}

// installKubeconfig rewrites unit's kubeconfig so that its current context's
// cluster is the unit's gate (server and CA); the user's credential is
// kept, since the gate authenticates it as the apiserver would. The
// original is kept as PATH.kha-orig (once). A dry run prints the result
// and writes nothing.
func installKubeconfig(e env, configFile, unit, path string, dry bool) int {
	cfg, err := config.Load(configFile)
	if err != nil {
		fmt.Fprintln(e.stderr, err)
		return exitConfig
	}
	g, ok := cfg.APIFence.GateFor(unit)
	if !ok {
		return fail(e, exitConfig, "%s has no gate in api_fence.gates of %s", unit, cfg.Path)
	}
	// With the fence off no supervisor listens at the gate: the rewritten
	// kubeconfig would cut the unit off its API server at its next start.
	if !cfg.APIFence.Enabled() && !dry {
		return fail(e, exitConfig, "api_fence.mode is %q in %s: nothing serves %s's gate at %s, so the unit could not reach its API server after its next restart; "+
			"set api_fence.mode = \"gate\" (or \"token\") and restart kha-supervisor first (--dry-run shows the changes)", cfg.APIFence.Mode, cfg.Path, unit, g.Addr)
	}
	if path, ok = unitKubeconfig(unit, path); !ok {
		return fail(e, exitConfig, "%s: give its kubeconfig with --kubeconfig", unit)
	}
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return fail(e, exitConfig, "read %s: %v", path, err)
	}
	caPEM, caNote, err := gateCA(cfg, dry)
	if err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	changes, err := pointAtGate(kc, "https://"+g.Addr, caPEM)
	if err != nil {
		return fail(e, exitConfig, "%s: %v", path, err)
	}
	if len(changes) == 0 {
		fmt.Fprintf(e.stdout, "%s already points %s at its gate %s; nothing to change\n", path, unit, g.Addr)
		return exitOK
	}
	for _, c := range changes {
		fmt.Fprintf(e.stdout, "%s: %s\n", path, c)
	}
	if caNote != "" {
		fmt.Fprintln(e.stdout, caNote)
	}
	if !cfg.APIFence.Enabled() {
		fmt.Fprintf(e.stdout, "note: api_fence.mode is %q: without --dry-run this is refused until the mode is \"gate\" or \"token\"\n", cfg.APIFence.Mode)
	}
	if dry {
		out, err := clientcmd.Write(*kc)
		if err != nil {
			return fail(e, exitFailure, "%v", err)
		}
		fmt.Fprintf(e.stdout, "--- %s (dry run, not written)\n%s", path, out)
		return exitOK
	}
	if err := backupOnce(path); err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fail(e, exitFailure, "%v", err)
	}
	fmt.Fprintf(e.stdout, "wrote %s (original kept as %s); restart %s to use it\n", path, path+".kha-orig", unit)
	return exitOK
}

// unitKubeconfig is the --kubeconfig given, or kubeadm's file for unit.
func unitKubeconfig(unit, path string) (string, bool) {
	if path != "" {
		return path, true
	}
	path, ok := kubeadmKubeconfigs[unit]
	return path, ok
}

// restoreKubeconfig puts PATH.kha-orig back as PATH. It reads no
// configuration: it is the way back when the fence or its file is broken.
// The backup is renamed over the file (atomic, and consumed: a later
// install-kubeconfig keeps the kubeconfig of that time, not this one).
func restoreKubeconfig(e env, unit, path string, dry bool) int {
	path, ok := unitKubeconfig(unit, path)
	if !ok {
		return fail(e, exitConfig, "%s: give its kubeconfig with --kubeconfig", unit)
	}
	orig := path + ".kha-orig"
	if _, err := clientcmd.LoadFromFile(orig); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail(e, exitConfig, "%s: no original kept (install-kubeconfig keeps it as %s on its first change); nothing to restore", path, orig)
		}
		return fail(e, exitConfig, "%s: not a kubeconfig, not restored: %v", orig, err)
	}
	if dry {
		fmt.Fprintf(e.stdout, "would put %s back as %s (dry run, nothing changed)\n", orig, path)
		return exitOK
	}
	if err := os.Rename(orig, path); err != nil {
		return fail(e, exitFailure, "restore %s: %v", path, err)
	}
	fmt.Fprintf(e.stdout, "restored %s from %s; restart %s to use it\n", path, orig, unit)
	return exitOK
}

// gateCA is the local CA's certificate. In a dry run it is not created if
// missing; a placeholder stands in and the note says so.
func gateCA(cfg config.Config, dry bool) ([]byte, string, error) {
	dir := cfg.APIFence.StateDir
	if dry {
		if _, err := os.Stat(filepath.Join(dir, "gate-ca.key")); errors.Is(err, fs.ErrNotExist) {
			return []byte("(the gate CA, created in " + dir + " when run without --dry-run)"),
				"note: the gate CA does not exist yet; it is created in " + dir + " when run without --dry-run", nil
		}
	}
	ca, err := localca.Open(dir)
	if err != nil {
		return nil, "", err
	}
	return ca.PEM(), "", nil
}

// pointAtGate edits the current context's cluster and says what changed.
func pointAtGate(kc *clientcmdapi.Config, server string, caPEM []byte) ([]string, error) {
	ctx, ok := kc.Contexts[kc.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("current-context %q is not defined", kc.CurrentContext)
	}
	cl, ok := kc.Clusters[ctx.Cluster]
	if !ok {
		return nil, fmt.Errorf("cluster %q of context %q is not defined", ctx.Cluster, kc.CurrentContext)
	}
	var changes []string
	name := "cluster " + ctx.Cluster
	if cl.Server != server {
		changes = append(changes, fmt.Sprintf("%s: server %s -> %s", name, cl.Server, server))
		cl.Server = server
	}
	if cl.CertificateAuthority != "" {
		changes = append(changes, fmt.Sprintf("%s: certificate-authority %s -> (removed; the gate's CA is inline)", name, cl.CertificateAuthority))
		cl.CertificateAuthority = ""
	}
	if string(cl.CertificateAuthorityData) != string(caPEM) {
		changes = append(changes, name+": certificate-authority-data -> the gate's local CA")
		cl.CertificateAuthorityData = caPEM
	}
	if cl.TLSServerName != "" {
		changes = append(changes, fmt.Sprintf("%s: tls-server-name %s -> (removed)", name, cl.TLSServerName))
		cl.TLSServerName = ""
	}
	if cl.InsecureSkipTLSVerify {
		changes = append(changes, name+": insecure-skip-tls-verify true -> false")
		cl.InsecureSkipTLSVerify = false
	}
	if cl.ProxyURL != "" {
		changes = append(changes, fmt.Sprintf("%s: proxy-url %s -> (removed)", name, cl.ProxyURL))
		cl.ProxyURL = ""
	}
	return changes, nil
}

// backupOnce keeps the first original: running the command again must not
// overwrite it with an already rewritten file.
func backupOnce(path string) error {
	orig := path + ".kha-orig"
	if _, err := os.Stat(orig); err == nil {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return os.WriteFile(orig, data, 0o600)
}
