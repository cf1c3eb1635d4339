package supervisor

import (
	"os"

	"github.com/kha-supervisor/kha-supervisor/group"
)

// The stored group (keys, records, leader, control, history, cluster view)
// lives in package group. These aliases let the daemon's code name it as
// before; they are a merge aid, to be inlined (group.X) and then removed.

type (
	State          = group.State
	Keys           = group.Keys
	Record         = group.Record
	UnitStatus     = group.UnitStatus
	Agreement      = group.Agreement
	LeaderInfo     = group.LeaderInfo
	Freeze         = group.Freeze
	Ban            = group.Ban
	Handoff        = group.Handoff
	Drill          = group.Drill
	Control        = group.Control
	Event          = group.Event
	RecordAPIFence = group.APIFence
)

const (
	Starting  = group.Starting
	Standby   = group.Standby
	Promoting = group.Promoting
	Active    = group.Active
	Demoting  = group.Demoting
	Fencing   = group.Fencing
	Stopped   = group.Stopped
	Fenced    = group.Fenced
	UnitsDown = group.UnitsDown
)

var (
	NewKeys       = group.NewKeys
	ReadMembers   = group.ReadMembers
	ReadLeader    = group.ReadLeader
	RequestDrill  = group.RequestDrill
	NewID         = group.NewID
	AppendHistory = group.AppendHistory
	ReadHistory   = group.ReadHistory

	decodeMembers = group.DecodeMembers
	parseControl  = group.ParseControl
	blockers      = group.Blockers
)

// hostName is this process's host name, for its record.
var hostName, _ = os.Hostname()
