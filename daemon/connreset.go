package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/connreset"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// connResetter is the fence's reset of this host's connections to etcd
// (etcd.reset_on_fence), or nil when it is off. The endpoints' addresses
// are resolved once, here: at the fence a partition may have taken DNS
// with it. An endpoint that does not resolve is reported now and at every
// fence.
func connResetter(ctx context.Context, cfg config.Config, log *slog.Logger) func() (int, error) {
	if !cfg.Etcd.ResetOnFence {
		return nil
	}
	lookup := func(host string) ([]netip.Addr, error) {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return net.DefaultResolver.LookupNetIP(lctx, "ip", host)
	}
	if ok, err := connreset.Capable(); err == nil && !ok {
		log.Error("etcd.reset_on_fence: no CAP_NET_ADMIN; a fence cannot reset the node's connections to etcd")
	}
	addrs, resolveErr := connreset.Endpoints(cfg.Etcd.Endpoints, lookup)
	if resolveErr != nil {
		log.Error("etcd.reset_on_fence: some endpoints have no address to reset connections to", "err", resolveErr)
	}
	return func() (int, error) {
		res, err := connreset.Reset(addrs)
		if resolveErr != nil {
			err = errors.Join(resolveErr, err)
		}
		return res.Destroyed, err
	}
}
