package supervisor

import "time"

// renewWarnEvery is how often a run of failed renewals of one lease is
// repeated as a warning while it lasts. A renewal goes out every renew
// interval (250 ms under fast-kill), so a warning per failure was eight
// lines a second for the two leases through a link's flap: the first
// failure warns, the rest go to debug, and the run's end says in one line
// how many failed and how close the fence came.
const renewWarnEvery = 5 * time.Second

// renewStreak is one lease's current run of failed renewals.
type renewStreak struct {
	failed int
	since  time.Time     // the first failure
	warned time.Time     // the last warning
	least  time.Duration // the least time left to the fence instant at a failure
}

// fail counts a failure seen at now with left until the fence instant and
// says whether it is to be logged as a warning.
func (r *renewStreak) fail(now time.Time, left time.Duration) (warn bool) {
	if r.failed == 0 {
		r.since, r.least = now, left
	}
	r.failed++
	r.least = min(r.least, left)
	if r.failed == 1 || now.Sub(r.warned) >= renewWarnEvery {
		r.warned = now
		return true
	}
	return false
}

// logRenewFailure logs a failed renewal: a warning at the first of a run and
// every renewWarnEvery after, debug in between.
func (s *Supervisor) logRenewFailure(r renewal) {
	st := s.loop.renewStreaks[r.name]
	if st == nil {
		if s.loop.renewStreaks == nil {
			s.loop.renewStreaks = map[string]*renewStreak{}
		}
		st = &renewStreak{}
		s.loop.renewStreaks[r.name] = st
	}
	now := deadlineNow()
	left := s.term.deadline.Left(now).Round(time.Millisecond)
	args := []any{"lease", r.name, "err", r.err, "fence_in", left, "failed", st.failed + 1}
	if st.fail(now, left) {
		s.log.Warn("renewal failed", args...)
		return
	}
	s.log.Debug("renewal failed", args...)
}

// endRenewStreak closes a run of failed renewals that no success ended:
// the lease was given up or replaced, or this node fenced (why). Without it
// a run that ends in a fence would show only its first warning, with the
// most time left.
func (s *Supervisor) endRenewStreak(name, why string) {
	if run := s.takeRenewStreak(name); run != nil {
		s.log.Warn("renewals never recovered", append([]any{"lease", name, "ended_by", why}, run...)...)
	}
}

// logRenewRecovered ends a run of failed renewals with one line.
func (s *Supervisor) logRenewRecovered(name string) {
	if run := s.takeRenewStreak(name); run != nil {
		s.log.Info("renewals recovered", append([]any{"lease", name}, run...)...)
	}
}

// takeRenewStreak ends the lease's open run, if any, and gives its summary
// as log attributes (nil: no run was open).
func (s *Supervisor) takeRenewStreak(name string) []any {
	st := s.loop.renewStreaks[name]
	if st == nil {
		return nil
	}
	delete(s.loop.renewStreaks, name)
	return []any{"failed", st.failed, "for", deadlineNow().Sub(st.since).Round(time.Millisecond), "least_fence_in", st.least}
}
