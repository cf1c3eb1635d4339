package supervisor

import (
	"reflect"
	"testing"
)

// maxSupervisorFields bounds Supervisor: state that grows belongs in a
// small type owning it (loopState, term, historian, dropinWatch, ...),
// not in another field of the one object every file sees (issue 20).
const maxSupervisorFields = 30

func TestSupervisorFieldCount(t *testing.T) {
	n := reflect.TypeFor[Supervisor]().NumField()
	t.Logf("Supervisor has %d fields", n)
	if n > maxSupervisorFields {
		t.Fatalf("Supervisor has %d fields, more than %d: group the new state in a small type that owns it", n, maxSupervisorFields)
	}
}
