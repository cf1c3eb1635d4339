// Package group is the stored group: the etcd key layout of one cluster and
// the values kept under it (member records, the election key, operator
// control requests, the transition history), with the functions that read
// and write them. The daemon (supervisor), the CLI and the lab all read the
// group through it, so the data model has one definition and none of them
// needs the daemon's D-Bus or systemd dependencies to read it.
//
// It holds data and single etcd operations only. It does not decide
// anything and guarantees nothing about safety: a value read here is a
// snapshot at one revision that may be stale when the caller acts on it.
// Who may campaign, when the promotion barrier is satisfied, when a holder
// must fence, and how the lifecycle moves from one State to the next are
// the daemon's (package supervisor and docs/architecture.md). Writes here
// are not fenced by the caller's lease unless the function says so
// (RequestHandoff and RequestDrill compare the election key's token).
package group
