package lab

import (
	"context"

	"github.com/kha-supervisor/kha-supervisor/lab/master"
)

// InstallPackage installs the kha-supervisor .deb at deb (a host path) in
// master n exactly as `up --deb` does (dpkg -i, the lab's configuration and
// watchdog drop-in, install-dropins, restart), whatever the lab was brought
// up with. The operator scenarios use it to put a removed or purged package
// back.
func (l *Lab) InstallPackage(ctx context.Context, n *master.Node, deb string) error {
	c := *l
	c.cfg.Deb = deb
	return c.installSupervisor(ctx, n)
}
