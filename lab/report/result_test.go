package report

import (
	"encoding/json"
	"testing"
)

// One Mark for both planes: the real plane's runs saved before it named
// the label "what"; they still load, and a saved Mark loads as it was.
func TestMarkReadsBothPlanesRuns(t *testing.T) {
	var old Mark
	if err := json.Unmarshal([]byte(`{"key":"evicted","at":"2026-12-02T01:02:03Z","what":"P1 evicted","owner":"Kubernetes","source":"audit log"}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Key != "evicted" || old.Label != "P1 evicted" || old.Owner != "Kubernetes" || old.Source != "audit log" || old.At.IsZero() {
		t.Errorf("a real-plane mark saved with \"what\": %+v", old)
	}
	b, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	var again Mark
	if err := json.Unmarshal(b, &again); err != nil || again != old {
		t.Errorf("round trip: %+v, %v; want %+v", again, err, old)
	}
	var standIn Mark
	if err := json.Unmarshal([]byte(`{"at":"2026-12-02T01:02:03Z","label":"heal","node":"m1"}`), &standIn); err != nil || standIn.Label != "heal" || standIn.Node != "m1" {
		t.Errorf("a stand-in mark: %+v, %v", standIn, err)
	}
}
