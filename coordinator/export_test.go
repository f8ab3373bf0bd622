package coordinator

// AccessTable returns the methods of the authorization table and, for
// each, the operation checked before the call ("" for a filtered list).
func AccessTable() map[string]string {
	out := make(map[string]string, len(methodAccess))
	for m, a := range methodAccess {
		out[m] = a.op
	}
	return out
}

// HoldSnapshotSlot takes one of the server's metadata snapshot slots
// (Options.MaxConcurrentSnapshots), waiting for it, and returns its
// release.
func (s *Server) HoldSnapshotSlot() func() {
	s.snapshotSlots <- struct{}{}
	return func() { <-s.snapshotSlots }
}
