package lab

import (
	"fmt"
	"os"
)

// profileFile remembers the timing profile the lab was brought up with, so
// that a later command that names none (`kha-lab run all`) writes the same
// profile into the configurations a scenario changes, judges by its
// timings and labels its report with it.
func (l *Lab) profileFile() string { return l.path("run", "profile") }

// ProfileByName is a shipped profile as the lab runs it.
func ProfileByName(name string) (Profile, error) {
	for _, p := range []Profile{Fast, FastKill, Default} {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("lab: unknown profile %q (fast, fast-kill or default)", name)
}

// resolveProfile picks the profile: the explicit choice, else the one the
// running lab was brought up with, else fast.
func (l *Lab) resolveProfile(explicit Profile) (Profile, error) {
	name, err := savedChoice(l.profileFile(), explicit.Name, "profile", "--profile")
	switch {
	case err != nil:
		return Profile{}, err
	case explicit.Name != "":
		return explicit, nil
	case name == "":
		if _, terr := os.Stat(l.etcdTimingFile()); terr == nil {
			l.log.Warn("lab: brought up by a kha-lab that did not save its profile; taking fast (name --profile if it runs another)")
		}
		return Fast, nil
	}
	p, perr := ProfileByName(name)
	if perr != nil {
		l.log.Warn("lab: the saved profile is not one; taking fast (name --profile)", "file", l.profileFile(), "err", perr)
		return Fast, nil
	}
	return p, nil
}

func (l *Lab) saveProfile() error {
	if err := os.WriteFile(l.profileFile(), []byte(l.cfg.Profile.Name+"\n"), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	return nil
}

// Profile is the timing profile the lab's supervisors run.
func (l *Lab) Profile() Profile { return l.cfg.Profile }
