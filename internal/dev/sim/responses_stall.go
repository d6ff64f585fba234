package sim

// Stall makes the simulator a provider whose work never ends (issue 40,
// review N-M2): while stalled, background work stays in_progress whatever
// its processing time, and a cancel is answered with the work as it
// stands, never confirmed (no "cancelled", no webhook); Complete still
// ends work by hand. Unstalled, work due ends at the next Step.
func (s *Responses) Stall(stalled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = stalled
}
