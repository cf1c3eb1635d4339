package supervisor

import (
	"context"
	"fmt"

	"github.com/kha-supervisor/kha-supervisor/supervisor/hooks"
)

// tokenDest is one place the term's fencing token must reach before any
// unit starts.
type tokenDest struct {
	name string
	send func(ctx context.Context, token int64) error
	// mayFail: a failure is logged and the promotion goes on (only
	// fencing.env and on_promote, under hooks.abort_on_promote_failure =
	// false); otherwise it fails the promotion.
	mayFail bool
}

// tokenDests are the token's destinations, in the order the promotion
// hands it on, after the barrier, the takeover delay and units_running:
//
//  1. fencing.env, which the units' drop-in reads, then the on_promote hook:
//     one step under hooks.abort_on_promote_failure (a failed write skips
//     the hook, as it always did);
//  2. the API fence: in token mode written to the apiservers and confirmed,
//     in gate mode the gates open for this token; a failure always fails
//     the promotion;
//  3. the published term: it opens, so the guard and the gates act on the
//     token (the promotion's own first start asks the guard right after).
func (s *Supervisor) tokenDests() []tokenDest {
	return []tokenDest{
		{name: "on_promote hook", send: s.promoteStep, mayFail: !s.cfg.Hooks.AbortOnPromoteErr},
		{name: "api fence", send: s.publishAPIFence},
		{name: "term", send: func(context.Context, int64) error { s.term.view.allowStarts(true); return nil }},
	}
}

// handToken hands token to every destination in order; the first that
// fails (and may not) fails the promotion before any unit starts.
func (s *Supervisor) handToken(ctx context.Context, token int64) error {
	for _, d := range s.tokenDests() {
		err := d.send(ctx, token)
		switch {
		case err == nil:
		case d.mayFail:
			s.log.Warn("on_promote hook failed; promoting anyway (abort_on_promote_failure = false)", "err", err)
		default:
			return fmt.Errorf("%s: %w", d.name, err)
		}
	}
	return nil
}

// promoteStep writes fencing.env for the units, then runs on_promote.
func (s *Supervisor) promoteStep(ctx context.Context, token int64) error {
	env := s.hookEnv(token)
	if p := s.opts.FencingEnv; p != "" {
		if err := hooks.WriteFencingEnv(p, map[string]string{
			"KHA_NODE": env["KHA_NODE"], "KHA_CLUSTER": env["KHA_CLUSTER"], "KHA_FENCING_TOKEN": env["KHA_FENCING_TOKEN"],
		}); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	if s.opts.Hook == nil {
		return nil
	}
	return s.opts.Hook(ctx, "on_promote", env)
}

// withdrawToken removes fencing.env once the units are confirmed down (a
// demotion's, a fence's), before on_demote or on_fence runs. Not fatal:
// the units are down already, and the next promotion replaces the file
// before anything starts.
func (s *Supervisor) withdrawToken() {
	if p := s.opts.FencingEnv; p != "" {
		_ = hooks.RemoveFencingEnv(p)
	}
}
