package supervisor

import "github.com/kha-supervisor/kha-supervisor/group"

// RecordHistory queues e as the loop would (tests of the historian only).
func (s *Supervisor) RecordHistory(e group.Event) { s.recordHistory(e) }
