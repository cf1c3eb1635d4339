package dropin

import (
	"fmt"
	"time"

	"github.com/kha-supervisor/kha-supervisor/supervisor/config"
)

// DefaultStartTimeout is the floor of StartTimeout, the packaged unit's
// TimeoutStartSec before it was sized from the defaults.
const DefaultStartTimeout = 30 * time.Second

// busConnect bounds the first D-Bus connection to systemd
// (fencing/systemd.New).
const busConnect = 10 * time.Second

// startMargin covers scheduling and the work between the steps below.
const startMargin = 5 * time.Second

// StartBudget is what the supervisor may wait for between exec and READY=1,
// from the configuration.
type StartBudget struct {
	Units          int           // len(units.managed): each may be found running and stopped
	StopMax        time.Duration // stop_timeout + kill_grace, per unit
	TTL            time.Duration // lease.ttl: how long an earlier incarnation's record may outlive it
	ClockRate      float64       // lease.clock_rate_error
	DialTimeout    time.Duration // etcd.dial_timeout
	RequestTimeout time.Duration // etcd.request_timeout
	PollInterval   time.Duration // units.poll_interval: the wait between registration attempts
}

// Validate reports why b cannot be sized, or nil.
func (b StartBudget) Validate() error {
	if b.Units < 0 || b.StopMax < 0 || b.TTL <= 0 || b.DialTimeout < 0 || b.RequestTimeout < 0 || b.PollInterval < 0 {
		return fmt.Errorf("start budget %+v: durations must be positive", b)
	}
	if b.ClockRate < 0 || b.ClockRate >= 1 {
		return fmt.Errorf("start budget: clock rate error %g: must be in [0, 1)", b.ClockRate)
	}
	return nil
}

// StartTimeout is the TimeoutStartSec the supervisor unit needs so that a
// slow but healthy start-up is never killed by systemd: connecting to
// systemd, dialling etcd and checking its version, stopping every managed
// unit found running, and above all waiting for the record of an earlier
// incarnation (killed, its lease still alive) to lapse, which takes up to
// one TTL measured on etcd's clock, then granting and registering. A TTL of
// a minute would otherwise trip the packaged 30 s and the node would never
// rejoin. Rounded up to whole seconds, never under DefaultStartTimeout.
// Meant for the supervisor's own drop-in (see RenderSupervisor).
func StartTimeout(b StartBudget) (time.Duration, error) {
	if err := b.Validate(); err != nil {
		return 0, err
	}
	oldRecord := time.Duration(float64(b.TTL) * (1 + b.ClockRate))
	d := busConnect + b.DialTimeout + 3*b.RequestTimeout +
		time.Duration(b.Units)*b.StopMax +
		oldRecord + b.PollInterval + 2*b.RequestTimeout + startMargin
	d = (d + time.Second - 1).Truncate(time.Second)
	return max(d, DefaultStartTimeout), nil
}

// StartBudgetOf reads the budget from a loaded configuration.
func StartBudgetOf(c config.Config) StartBudget {
	return StartBudget{
		Units: len(c.Units.Managed), StopMax: c.Timeouts().StopMax(), TTL: c.Lease.TTL, ClockRate: c.Lease.ClockRate,
		DialTimeout: c.Etcd.DialTimeout, RequestTimeout: c.Etcd.RequestTimeout, PollInterval: c.Units.PollInterval,
	}
}
