package lab

import (
	"errors"
	"strings"
	"testing"
)

func TestUpNamesTheMissingCommandsAndTheFix(t *testing.T) {
	without := func(gone ...string) func(string) (string, error) {
		return func(c string) (string, error) {
			for _, g := range gone {
				if c == g {
					return "", errors.New("not found")
				}
			}
			return "/usr/bin/" + c, nil
		}
	}
	if err := checkHost(without()); err != nil {
		t.Fatalf("every command there: %v", err)
	}
	err := checkHost(without("systemd-nspawn", "nsenter"))
	if err == nil || !strings.Contains(err.Error(), "systemd-nspawn, nsenter") || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("two missing: %v, want both named and the fix", err)
	}
}
