package scenario

import (
	"slices"
	"testing"
)

// The issue scenarios continue the matrix's numbering, never collide with
// it, are all reachable by number, and stay out of CI (they are long).
func TestIssueScenariosNumbering(t *testing.T) {
	seen := map[int]string{}
	for _, s := range slices.Concat(All, Operator, Issues) {
		if other, dup := seen[s.ID]; dup {
			t.Fatalf("scenario %d is both %s and %s", s.ID, other, s.Name)
		}
		seen[s.ID] = s.Name
	}
	for _, s := range Issues {
		if s.ID < 23 {
			t.Errorf("issue scenario %s has ID %d; the matrix has 1-22", s.Name, s.ID)
		}
		if got, ok := Lookup(s.ID); !ok || got.Name != s.Name {
			t.Errorf("Lookup(%d) = %v, %v", s.ID, got.Name, ok)
		}
		if slices.Contains(CISubset(), s.ID) {
			t.Errorf("scenario %d is in CISubset; the issue scenarios are too long for CI", s.ID)
		}
		if s.run == nil || s.Fault == "" || s.Expected == "" {
			t.Errorf("scenario %d lacks a run, a fault or an expectation", s.ID)
		}
	}
	if ids := IssueIDs(); !slices.IsSorted(ids) || len(ids) != len(Issues) {
		t.Errorf("IssueIDs() = %v: want every issue scenario, in order", ids)
	}
}

func TestScenarioTableMatchesBrief(t *testing.T) {
	if len(All) != 15 {
		t.Fatalf("%d scenarios, the brief's matrix has 15", len(All))
	}
	for i, s := range All {
		if s.ID != i+1 || s.run == nil || s.Fault == "" || s.Expected == "" {
			t.Fatalf("scenario %d incomplete: %+v", i+1, s)
		}
	}
	if ids := SoakSet(); len(ids) != 14 {
		t.Fatalf("soak set %v", ids)
	}
}

// The CI subset (from the tables' CI marks) keeps what issue 3 asks of it
// (1, 4, 5, 9 and 13) and every operator scenario; the soak draws from the
// matrix without scenario 10 (an overlap made by hand on purpose).
func TestSetsFromTheTables(t *testing.T) {
	ci := CISubset()
	for _, id := range append([]int{1, 4, 5, 9, 13}, OperatorIDs()...) {
		if !slices.Contains(ci, id) {
			t.Errorf("CI subset %v lacks scenario %d", ci, id)
		}
	}
	soak := SoakSet()
	if slices.Contains(soak, 10) {
		t.Errorf("soak set %v draws scenario 10", soak)
	}
	for _, id := range soak {
		if id > len(All) {
			t.Errorf("soak set %v draws scenario %d, not of the matrix", soak, id)
		}
	}
}
