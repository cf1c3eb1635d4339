package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/kha-supervisor/kha-supervisor/fencing/connreset"
	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// connResets are the two resets of this host's connections to etcd: all of
// them at a fence (etcd.reset_on_fence), those to the members that do not
// answer at a promotion (etcd.reset_silent). The endpoints' addresses
// are resolved once, here: at a fence a partition may have taken DNS with
// it. An endpoint that does not resolve is reported now and at every reset
// that would have covered it.
type connResets struct {
	byEndpoint map[string][]netip.AddrPort
	resolveErr map[string]error // endpoint -> why it has no address
}

func newConnResets(ctx context.Context, cfg config.Config, log *slog.Logger) *connResets {
	if !cfg.Etcd.ResetOnFence && !cfg.Etcd.ResetSilent {
		return nil
	}
	lookup := func(host string) ([]netip.Addr, error) {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return net.DefaultResolver.LookupNetIP(lctx, "ip", host)
	}
	if ok, err := connreset.Capable(); err == nil && !ok {
		log.Error("etcd.reset_on_fence/reset_silent: no CAP_NET_ADMIN; this node's connections to etcd cannot be reset")
	}
	r := &connResets{byEndpoint: map[string][]netip.AddrPort{}, resolveErr: map[string]error{}}
	var errs []error
	for _, ep := range cfg.Etcd.Endpoints {
		addrs, err := connreset.Endpoints([]string{ep}, lookup)
		if err != nil {
			r.resolveErr[ep] = err
			errs = append(errs, err)
		}
		r.byEndpoint[ep] = addrs
	}
	if len(errs) > 0 {
		log.Error("etcd.reset_on_fence/reset_silent: some endpoints have no address to reset connections to", "err", errors.Join(errs...))
	}
	return r
}

// to destroys the connections to the given endpoints (each one of
// etcd.endpoints); an endpoint the configuration does not list is an error.
func (r *connResets) to(endpoints []string) (int, error) {
	var addrs []netip.AddrPort
	var errs []error
	for _, ep := range endpoints {
		a, ok := r.byEndpoint[ep]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: not in etcd.endpoints", ep))
			continue
		}
		if err := r.resolveErr[ep]; err != nil {
			errs = append(errs, err)
		}
		addrs = append(addrs, a...)
	}
	res, err := connreset.Reset(addrs)
	return res.Destroyed, errors.Join(append(errs, err)...)
}

// fence is Options.ResetConnections: every endpoint's connections, or nil
// when etcd.reset_on_fence is off.
func (r *connResets) fence(cfg config.Etcd) func() (int, error) {
	if r == nil || !cfg.ResetOnFence {
		return nil
	}
	return func() (int, error) { return r.to(cfg.Endpoints) }
}

// promote is Options.ResetConnectionsTo, or nil when
// etcd.reset_silent is off.
func (r *connResets) promote(cfg config.Etcd) func([]string) (int, error) {
	if r == nil || !cfg.ResetSilent {
		return nil
	}
	return r.to
}
