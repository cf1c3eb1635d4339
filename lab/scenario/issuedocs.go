package scenario

// writeIssueAnswers is the part of docs/failure-modes.md about scenarios
// 23-36 (issues 13 and 11): what an operator asks, with the figures of the
// runs given (m renders one metric of one scenario, verdict the caveats).
// Nothing is written when none of them was run.
func writeIssueAnswers(p func(string, ...any), rows map[int]Row, m func(int, string) string, verdict func(...int) string) {
	ran := false
	for _, s := range Issues {
		_, ok := rows[s.ID]
		ran = ran || ok
	}
	if !ran {
		return
	}
	p("## Paths the first matrix could not see (scenarios 23-36)\n\n")
	p("`kha-lab run issues`: the overlap paths of issue 13 and the availability gaps of issue 11, each\n")
	p("judged like the matrix (zero overlap, plus the scenario's own bound).\n\n")

	p("**Someone deletes the election key and the leader's record, or the whole prefix?** (scenarios 23, 24)\n")
	p("With a scheduler that uses its whole SIGTERM budget, the new leader's first unit started %s after\n", m(23, "barrier"))
	p("the old one's last heartbeat (%s when the whole prefix went); every member's record was back %s\n", m(24, "barrier"), m(23, "records_back"))
	p("(%s) after the deletion.%s\n\n", m(24, "records_back"), verdict(23, 24))

	p("**D-Bus or systemd hung on the leader when it loses etcd?** (scenarios 25, 26) With dbus-daemon frozen,\n")
	p("the units' last heartbeat came %s after the cut, %s before the lease could lapse; with the\n", m(25, MStopped), m(25, "lapse_margin"))
	p("container's PID 1 frozen, %s after the cut, %s before.%s\n\n", m(26, MStopped), m(26, "lapse_margin"), verdict(25, 26))

	p("**An operator's start while a new leader waits to start its units?** (scenario 27) Refused; the\n")
	p("promotion started the units %s after the win (lease.takeover_delay 5 s).%s\n\n", m(27, "units_after_win"), verdict(27))

	p("**A copy of the scheduler started by hand, outside systemd?** (scenarios 28, 29) On the standby it ran\n")
	p("%s; beside the unit on the leader, %s (from its start to its last heartbeat).%s\n\n", m(28, "copy_ran"), m(29, "copy_ran"), verdict(28, 29))

	p("**A drop-in that removes the guard?** (scenario 30) The node refuses to campaign: after the leader\n")
	p("stopped nobody took over, and the leader had its units back %s after it was started again.%s\n\n", m(30, "leader_back"), verdict(30))

	p("**A minority partition** (the leader with one etcd member, scenario 32): the other master had the units\n")
	p("running %s after the cut (a rack cut, scenario 1: %s).%s\n\n", m(32, MFailover), m(1, MFailover), verdict(32))

	p("**A crashed leader** (kill -9, scenario 33): units running again %s after the kill (target 1.5 s).%s\n\n", m(33, MFailover), verdict(33))

	p("**A cut while etcd changes leader** (scenario 34): failover %s (etcd extends leases on a leader\n", m(34, MFailover))
	p("change; bounded by two TTLs).%s\n\n", verdict(34))

	p("**A cooldown that leaves nobody** (scenario 36): the cooled-down node had the units running %s\n", m(36, MFailover))
	p("after the other master stopped, with %s of its cooldown left.%s\n\n", m(36, "cooldown_left"), verdict(36))
}
