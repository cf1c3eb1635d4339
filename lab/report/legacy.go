package report

import (
	"regexp"
	"strconv"
	"strings"
)

// This file is the one place that reads figures back out of the notes:
// reports saved before Schema 2 (docs/failure-modes.md's "Before the fixes"
// and the operator doc are regenerated from such runs) kept the figures the
// documents quote only as sentences. upgradeLegacy converts them once, on
// Load, into the typed Figures the documents read. The sentences are the
// ones the scenarios wrote then; new reports never come through here.

// Prefixes and patterns of the legacy notes.
const (
	legacyGuardSaid   = "guard said: "
	legacyHandoffNote = "handoffs, ms from the command to every target unit beating (supervisor part + units' own start, old units' stop within the supervisor part): "
	legacyWitness     = ": witness: "
)

var legacyHandoffRE = regexp.MustCompile(`(-?[0-9]+) \((-?[0-9]+) \+ (-?[0-9]+), old units' stop (-?[0-9]+)\)`)

// upgradeLegacy fills every result's Figures from its notes and marks the
// report as converted.
func upgradeLegacy(rep *Report) {
	for i := range rep.Results {
		res := &rep.Results[i]
		res.Figures = legacyFigures(res.ID, res.Notes)
	}
	rep.Schema = Schema
}

// legacyFigures reads the figures of scenario id out of its notes.
func legacyFigures(id int, notes []string) Figures {
	var f Figures
	for i, n := range notes {
		if strings.HasPrefix(n, PromotionFailedNote) {
			f.PromotionFailures = append(f.PromotionFailures, n)
		}
		switch id {
		case 9:
			if j := strings.Index(n, legacyGuardSaid); j >= 0 && f.GuardMessage == "" {
				f.GuardMessage = n[j+len(legacyGuardSaid):]
			}
		case 16:
			f.Handoffs = append(f.Handoffs, legacyHandoffs(n)...)
		case 18:
			if strings.HasPrefix(n, "handoff --to") {
				f.BanRefusals = append(f.BanRefusals, n)
			}
		case 19:
			if d, ok := legacyDrill(n); ok {
				if i+1 < len(notes) && strings.Contains(notes[i+1], legacyWitness) {
					_, d.Witness, _ = strings.Cut(notes[i+1], legacyWitness)
				}
				f.Drills = append(f.Drills, d)
			}
		case 22:
			switch {
			case strings.HasPrefix(n, "upgraded "):
				f.Upgrades = append(f.Upgrades, n)
			case strings.HasPrefix(n, "guard on "):
				f.GuardAnswers = append(f.GuardAnswers, n)
			}
		}
	}
	return f
}

// legacyHandoffs reads the samples of scenario 16's handoff note.
func legacyHandoffs(note string) []Handoff {
	rest, ok := strings.CutPrefix(note, legacyHandoffNote)
	if !ok {
		return nil
	}
	var out []Handoff
	for _, m := range legacyHandoffRE.FindAllStringSubmatch(rest, -1) {
		var v [4]float64
		for i := range v {
			v[i], _ = strconv.ParseFloat(m[i+1], 64)
		}
		out = append(out, Handoff{Total: v[0], Supervisor: v[1], UnitStart: v[2], UnitStop: v[3]})
	}
	return out
}

// legacyDrill reads a "drill ARGS -> exit N: line / line" note. The exit
// wanted was 7 for the deliberately tight 100 ms expectation, 0 otherwise.
func legacyDrill(note string) (Drill, bool) {
	if !strings.HasPrefix(note, "drill ") || !strings.Contains(note, " -> exit ") {
		return Drill{}, false
	}
	head, body, _ := strings.Cut(note, ": ")
	cmd, exit, _ := strings.Cut(head, " -> ")
	code, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(exit), "exit "))
	if err != nil {
		return Drill{}, false
	}
	d := Drill{Args: strings.TrimPrefix(strings.TrimSpace(cmd), "drill "), Exit: code, Output: strings.Split(body, " / ")}
	if strings.Contains(note, "--expect-within 100ms") {
		d.WantExit = 7
	}
	return d, true
}
