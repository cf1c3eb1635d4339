package timesync

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestFindAndWarn(t *testing.T) {
	conf := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tc := range []struct {
		name   string
		files  fstest.MapFS
		rho    float64
		want   []string // daemon names found
		slew   float64  // first daemon's max slew
		warn   string   // substring of the only warning; "" = none
		errStr string
	}{
		{name: "nothing installed", files: fstest.MapFS{}, rho: 0.01},
		{name: "chrony default (Debian path)", files: fstest.MapFS{"etc/chrony/chrony.conf": conf("pool 2.debian.pool.ntp.org iburst\n")},
			rho: 0.01, want: []string{"chronyd"}, slew: ChronyDefaultMaxSlew, warn: "chronyd may slew the clock by 83333 ppm (chrony's default maxslewrate"},
		{name: "chrony limited", files: fstest.MapFS{"etc/chrony.conf": conf("# RHEL\nmaxslewrate 500\n")},
			rho: 0.01, want: []string{"chronyd"}, slew: 500},
		{name: "chrony limit above rho", files: fstest.MapFS{"etc/chrony.conf": conf("maxslewrate 20000\n")},
			rho: 0.01, want: []string{"chronyd"}, slew: 20000, warn: "set maxslewrate at most 10000 in /etc/chrony.conf"},
		{name: "chrony limit in a confdir file", files: fstest.MapFS{
			"etc/chrony/chrony.conf":       conf("confdir /etc/chrony/conf.d\n"),
			"etc/chrony/conf.d/slew.conf":  conf("maxslewrate 1000\n"),
			"etc/chrony/conf.d/README.txt": conf("maxslewrate 99999\n"),
		}, rho: 0.01, want: []string{"chronyd"}, slew: 1000},
		{name: "chrony include", files: fstest.MapFS{
			"etc/chrony/chrony.conf": conf("include /etc/chrony/local.conf\n"),
			"etc/chrony/local.conf":  conf("  MaxSlewRate   250.5\n"),
		}, rho: 0.01, want: []string{"chronyd"}, slew: 250.5},
		{name: "chrony bad value", files: fstest.MapFS{"etc/chrony.conf": conf("maxslewrate fast\n")},
			rho: 0.01, errStr: `/etc/chrony.conf:1: maxslewrate "fast"`},
		{name: "timesyncd", files: fstest.MapFS{"etc/systemd/timesyncd.conf": conf("[Time]\n")},
			rho: 0.01, want: []string{"systemd-timesyncd"}, slew: KernelPLLMaxSlew},
		{name: "timesyncd with a tiny rho", files: fstest.MapFS{"etc/systemd/timesyncd.conf": conf("[Time]\n")},
			rho: 0.0001, want: []string{"systemd-timesyncd"}, slew: KernelPLLMaxSlew, warn: "systemd-timesyncd may slew the clock by 500 ppm"},
		{name: "ntpd", files: fstest.MapFS{"etc/ntp.conf": conf("server x\n")},
			rho: 0.01, want: []string{"ntpd"}, slew: KernelPLLMaxSlew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, err := Find(tc.files)
			if tc.errStr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errStr) {
					t.Fatalf("err %v, want %q", err, tc.errStr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range ds {
				names = append(names, d.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("found %v, want %v", names, tc.want)
			}
			if len(ds) > 0 && ds[0].MaxSlew != tc.slew {
				t.Fatalf("max slew %g, want %g", ds[0].MaxSlew, tc.slew)
			}
			w := Warnings(ds, tc.rho)
			switch {
			case tc.warn == "" && len(w) > 0:
				t.Fatalf("warnings %q, want none", w)
			case tc.warn != "" && (len(w) != 1 || !strings.Contains(w[0], tc.warn)):
				t.Fatalf("warnings %q, want one containing %q", w, tc.warn)
			}
		})
	}
}
