// Package catchup holds how far behind the leader a Raft voter may be and
// still count as caught up: the rules the Raft backend enforces and the
// operator tools (metaplane raft transfer-leader, remove-voter) check
// before they ask. It imports nothing, so the host binary can share the
// rules without linking the Raft engine.
package catchup

// MaxTransferLag is how far behind the leader's commit index (as of its
// last progress report) a voter may be and still receive the leadership.
const MaxTransferLag = 100

// MaxRemovalLag is how far behind (as of its last progress report) a
// remaining voter may be and still count as caught up for a removal: a
// report made during a burst of writes may be a few hundred entries
// behind, which the member makes up within moments.
const MaxRemovalLag = 1000
