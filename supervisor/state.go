package supervisor

import (
	"slices"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// The lifecycle as a table (docs/architecture.md, "The lifecycle", has the
// same diagram):
//
//	                  member lease lost
//	            +-----------------------+
//	            v                       |
//	start --> starting --registered--> standby --elected--> promoting --units started--> active
//	            |                       ^ |                     |                          |
//	            |                       | |                     | promotion failed,        | SIGTERM, failure threshold,
//	            |                       | |                     | SIGTERM, member lease    | ban, handoff
//	            |                       | |                     | lost                     |
//	            |                       | |                     v                          |
//	            |                       +-|------released---- demoting <-------------------+
//	            |                         |                     |
//	            v                         v                     v
//	         stopped <--------------------+----- SIGTERM -------+    (left the group: exit 0)
//
//	promoting, active, demoting --(deadline passed; key, lease or record lost; drill;
//	                               demotion not confirmed)--> fencing --> exit 3 (4 if incomplete)
//
// starting -> starting and standby -> standby are a change of reason only
// (a retried start-up, a new leader seen). Fenced and units-down are history
// entries, never states of the loop. The edges that follow an observation
// are taken by step (loop.go), assessUnits (monitor.go) and Run's fence
// checks; those that follow a job by its completion handler (done.go).
// TestEveryEdgeTakenIsInTheTable drives each against this table.
var lifecycle = map[group.State][]group.State{
	group.Starting:  {group.Starting, group.Standby, group.Stopped},
	group.Standby:   {group.Standby, group.Starting, group.Promoting, group.Stopped},
	group.Promoting: {group.Active, group.Demoting, group.Fencing},
	group.Active:    {group.Demoting, group.Fencing},
	group.Demoting:  {group.Standby, group.Stopped, group.Fencing},
}

// allowed reports whether the lifecycle table has the edge from -> to.
func allowed(from, to group.State) bool {
	return slices.Contains(lifecycle[from], to)
}

// checkEdge counts and logs a transition the table does not have. It never
// refuses one: the loop's safety does not depend on the table, and a
// supervisor that stopped moving would be worse than one that moved along an
// undocumented edge. Tests assert the count stays zero.
func (s *Supervisor) checkEdge(from, to group.State) {
	if allowed(from, to) {
		return
	}
	s.badTransitions.Add(1)
	s.log.Error("transition not in the lifecycle table (a bug: please report it)", "from", from, "to", to)
}

// BadTransitions is how many transitions this member took that the
// lifecycle table does not have; always zero unless there is a bug.
func (s *Supervisor) BadTransitions() int64 { return s.badTransitions.Load() }
