package report

import (
	"reflect"
	"testing"
)

// Each legacy note becomes its typed figure; other notes stay notes.
func TestLegacyFigures(t *testing.T) {
	for _, tc := range []struct {
		id    int
		notes []string
		want  Figures
	}{
		{9, []string{"refused (systemctl exit 1); guard said: refusing: leader is m1", "refused (systemctl exit 1); guard said: second"},
			Figures{GuardMessage: "refusing: leader is m1"}},
		{18, []string{"handoff --to m2 refused (exit 2): banned", "handoff to any member refused (exit 2): banned"},
			Figures{BanRefusals: []string{"handoff --to m2 refused (exit 2): banned"}}},
		{22, []string{"upgraded m1 to 1.1 in 800ms (dpkg -i); m2 took over", "guard on m1 refused (systemctl exit 1): standby", "dpkg -r took 1s"},
			Figures{Upgrades: []string{"upgraded m1 to 1.1 in 800ms (dpkg -i); m2 took over"}, GuardAnswers: []string{"guard on m1 refused (systemctl exit 1): standby"}}},
		{19, []string{"drill failover --expect-within 100ms -> exit 7: a / b", "drill failover: witness: seen", "drill handoff --expect-within 10s -> exit x: not a drill note"},
			Figures{Drills: []Drill{{Args: "failover --expect-within 100ms", Exit: 7, WantExit: 7, Output: []string{"a", "b"}, Witness: "seen"}}}},
		{4, []string{PromotionFailedNote + "m2 at 10:00:00.000: demoted", "guard said: not scenario 9"},
			Figures{PromotionFailures: []string{PromotionFailedNote + "m2 at 10:00:00.000: demoted"}}},
	} {
		if got := legacyFigures(tc.id, tc.notes); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("scenario %d: got %+v, want %+v", tc.id, got, tc.want)
		}
	}
}
