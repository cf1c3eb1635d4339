package supervisor

// RecordHistory queues e as the loop would (tests of the historian only).
func (s *Supervisor) RecordHistory(e Event) { s.recordHistory(e) }
