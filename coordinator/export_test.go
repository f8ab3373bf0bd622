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

// BucketRebuilds returns how many times the open client's bucket states
// were rebuilt from the whole /tabletservers subtree (-1: no client open).
func (s *Server) BucketRebuilds() int64 {
	if b := s.bucketsSink.Load(); b != nil {
		return b.rebuilds.Load()
	}
	return -1
}

// BucketStatesCurrent reports whether the open client's bucket states have
// refreshed every change their image recorded.
func (s *Server) BucketStatesCurrent() bool {
	b := s.bucketsSink.Load()
	return b != nil && b.current()
}
