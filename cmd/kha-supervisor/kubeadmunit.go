package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/kha-supervisor/kha-supervisor/packaging/staticpod"
)

func init() { register(kubeadmUnitCommand) }

func kubeadmUnitCommand(e env) *cobra.Command {
	var binDir string
	c := &cobra.Command{
		Use:     "kubeadm-unit MANIFEST",
		GroupID: groupNode,
		Short:   "print the systemd unit that replaces a kubeadm static pod of kube-scheduler or kube-controller-manager",
		Long: `Read a kubeadm static-pod manifest (/etc/kubernetes/manifests/kube-scheduler.yaml or kube-controller-manager.yaml) and print the systemd unit that runs the same command line under kha-supervisor: --leader-elect=false (kha-supervisor's lease is the only election), Restart=on-failure, and for kube-scheduler SuccessExitStatus=1. What the operator must still do goes to standard error. Refuses (exit 2) a manifest it cannot reproduce as a unit: more than one container, a volume mounted at another path than the host's, environment taken from the API.
Nothing is written: redirect the output to /etc/systemd/system/NAME.service (docs/install.md).`,
		Args: exactArgs("MANIFEST"),
		RunE: func(c *cobra.Command, args []string) error {
			return exit(kubeadmUnit(e, args[0], binDir))
		},
	}
	c.Flags().StringVar(&binDir, "bin-dir", "/usr/local/bin", "the `directory` holding the component's binary on the host")
	_ = c.MarkFlagFilename("bin-dir")
	return c
}

func kubeadmUnit(e env, manifest, binDir string) int {
	b, err := os.ReadFile(manifest)
	if err != nil {
		return fail(e, exitConfig, "read the manifest: %v", err)
	}
	u, err := staticpod.Convert(manifest, b, staticpod.Options{BinDir: binDir})
	if err != nil {
		return fail(e, exitConfig, "%v", err)
	}
	fmt.Fprint(e.stdout, u.Text)
	for _, n := range u.Notes {
		fmt.Fprintf(e.stderr, "kha-supervisor: %s: %s\n", u.Name, n)
	}
	return exitOK
}
