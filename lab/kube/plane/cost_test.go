package plane

import "testing"

func TestParseProcCost(t *testing.T) {
	status := "Name:\tkha-supervisor\nVmPeak:\t 1300000 kB\nVmRSS:\t   32768 kB\nThreads:\t9\n"
	// comm with a space and a parenthesis, as a renamed process may have.
	stat := "412 (kha (sup) x) S 1 412 412 0 -1 4194560 3000 0 0 0 250 75 0 0 20 0 9 0 1000 1300000000 8192\n"
	rss, cpu, err := parseProcCost(status + stat)
	if err != nil {
		t.Fatal(err)
	}
	if rss != 32 || cpu != 3.25 {
		t.Errorf("rss %v MiB cpu %v s, want 32 and 3.25", rss, cpu)
	}
	for name, bad := range map[string]string{
		"no stat":    status,
		"no VmRSS":   stat,
		"short stat": status + "412 (k) S 1 2 3\n",
		"bad VmRSS":  "VmRSS:\t x kB\n" + stat,
		"bad utime":  status + "412 (k) S 1 412 412 0 -1 4194560 3000 0 0 0 u 75 0\n",
	} {
		if _, _, err := parseProcCost(bad); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
