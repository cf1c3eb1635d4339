package scenario

import (
	"cmp"
	"slices"

	"github.com/kha-supervisor/kha-supervisor/lab"
	"github.com/kha-supervisor/kha-supervisor/lab/kube/plane"
)

// RealExpected is what every real-plane scenario expects: it is judged at
// the resource (both apiservers' audit logs and etcd's commits), by
// plane.Runner, the same way for every fault.
const RealExpected = "zero overlap and zero late commits at the resource; the service resumes (judged at the apiservers and at etcd)"

// realPlane are the real plane's scenarios, registered from their files'
// init functions (s40-s69).
var realPlane []Scenario

// registerReal adds a real-plane scenario to the registry.
func registerReal(s plane.Spec) {
	realPlane = append(realPlane, Scenario{ID: s.ID, Name: s.Name, Fault: s.Fault, Expected: RealExpected, Real: &s})
}

// RealPlane are the real plane's scenarios, by ID.
func RealPlane() []Scenario {
	return slices.SortedFunc(slices.Values(realPlane), func(a, b Scenario) int { return cmp.Compare(a.ID, b.ID) })
}

// RealIDs are the IDs of the real plane's scenarios that run in the lab's
// default etcd layout (separate), in order.
func RealIDs() []int { return realIDs(func(l string) bool { return l != lab.LayoutStacked }) }

// StackedIDs are the IDs of the scenarios made for the stacked etcd layout
// (`kha-lab up --plane real --etcd-layout stacked`), in order.
func StackedIDs() []int { return realIDs(func(l string) bool { return l == lab.LayoutStacked }) }

func realIDs(layout func(string) bool) []int {
	var ids []int
	for _, s := range RealPlane() {
		if layout(s.Real.Layout) {
			ids = append(ids, s.ID)
		}
	}
	return ids
}

// RealSpec is the real-plane part of scenario id (a plane.Lookup).
func RealSpec(id int) (plane.Spec, bool) {
	if s, ok := Lookup(id); ok && s.Real != nil {
		return *s.Real, true
	}
	return plane.Spec{}, false
}
