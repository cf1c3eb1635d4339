package layout_test

import (
	"os"
	"path"
	"strings"
	"testing"

	"github.com/kha-supervisor/kha-supervisor/layout"
)

// The files that cannot import this package (the unit, nfpm's file list)
// spell the same paths.
func TestPackagingAgrees(t *testing.T) {
	unit := read(t, "../packaging/systemd/kha-supervisor.service")
	for _, want := range []string{
		"ExecStart=" + layout.Binary + " run -c " + layout.ConfigPath + "\n",
		"RuntimeDirectory=" + path.Base(layout.RunDir) + "\n",
		"StateDirectory=" + path.Base(layout.StateDir) + "\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("packaging/systemd/kha-supervisor.service lacks %q", want)
		}
	}
	nfpm := read(t, "../packaging/nfpm.yaml")
	for _, want := range []string{
		"dst: " + layout.Binary + "\n",
		"dst: " + layout.Guard + "\n",
		"dst: /usr/lib/systemd/system/" + layout.SupervisorUnit + "\n",
		"dst: " + layout.ConfigPath + "\n",
	} {
		if !strings.Contains(nfpm, want) {
			t.Errorf("packaging/nfpm.yaml lacks %q", want)
		}
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
