package lab

import (
	"context"

	"github.com/kha-supervisor/kha-supervisor/lab/master"
)

// installSupervisor installs kha-supervisor in a master. Filled in once the
// daemon and its packaging exist.
func (l *Lab) installSupervisor(ctx context.Context, n *master.Node) error {
	return nil
}
