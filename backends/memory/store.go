package memory

import (
	"sort"
	"sync"
	"time"

	"github.com/metaplane/metaplane/core"
)

// StoreOptions configure a Store. The zero value is usable: every field
// documents its default.
type StoreOptions struct {
	// SessionTimeout is the session timeout of a client that asks for none
	// (core.ClientOptions.SessionTimeout == 0). Default 10s.
	SessionTimeout time.Duration
	// HistoryRetention is how many revisions of change history are kept for
	// watches; a watch from an older revision fails with core.ErrCompacted,
	// and a consumer that falls further behind than this gets a final
	// core.ErrCompacted response. Default 10000.
	HistoryRetention int
	// MaxValueSize is the largest node value accepted, in bytes. Default
	// core.DefaultMaxValueSize.
	MaxValueSize int
	// Now is the store's clock, for node times and session and lease
	// deadlines. Default time.Now.
	Now func() time.Time
}

func (o StoreOptions) withDefaults() StoreOptions {
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 10 * time.Second
	}
	if o.HistoryRetention <= 0 {
		o.HistoryRetention = 10000
	}
	if o.MaxValueSize <= 0 {
		o.MaxValueSize = core.DefaultMaxValueSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// node is one node's own state. Nodes are copied on write, so a *node held
// by an undo record or a reader never changes.
type node struct {
	data      []byte
	version   int64
	cversion  int64 // counts creates and deletes of children: the sequence
	childRev  int64 // the revision of the last create or delete of a child
	createRev int64
	modRev    int64
	ctime     int64
	mtime     int64
	owner     int64 // session or lease id of an ephemeral; 0 if persistent
}

// histEntry is the change record of one revision.
type histEntry struct {
	rev    int64
	events []core.WatchEvent
}

type session struct {
	id       int64
	timeout  time.Duration
	deadline time.Time
	client   *Backend
}

type lease struct {
	id       int64
	owner    string
	ttl      time.Duration
	deadline time.Time
}

// Store is one shared in-memory store: the node tree, the revision counter,
// the change history, sessions, leases and the leader election. Clients of
// it are made with NewClient. Its methods are safe for concurrent use; one
// mutex guards everything, which keeps the reference obviously correct.
type Store struct {
	opts StoreOptions

	mu       sync.Mutex
	nodes    map[string]*node
	children map[string]map[string]struct{}
	rev      int64
	// history holds the entries of revisions compacted+1 .. rev.
	history   []histEntry
	compacted int64
	// changed is closed (and replaced) at every commit and compaction.
	changed chan struct{}

	nextID     int64
	sessions   map[int64]*session
	leases     map[int64]*lease
	ephemerals map[int64]map[string]struct{} // owner id -> paths

	epoch  int64 // last epoch handed out; -1 before the first leader
	queue  []*candidacy
	leader *candidacy

	clients map[*Backend]struct{}
	closed  bool
	stop    chan struct{}
	kick    chan struct{}
	wg      sync.WaitGroup
}

// NewStore returns an empty store (only the root "/" exists) and starts its
// expiry timer. Close it when done.
func NewStore(opts StoreOptions) *Store {
	opts = opts.withDefaults()
	now := opts.Now().UnixMilli()
	s := &Store{
		opts:       opts,
		nodes:      map[string]*node{"/": {ctime: now, mtime: now}},
		children:   map[string]map[string]struct{}{},
		changed:    make(chan struct{}),
		nextID:     0x1000,
		sessions:   map[int64]*session{},
		leases:     map[int64]*lease{},
		ephemerals: map[int64]map[string]struct{}{},
		epoch:      -1,
		clients:    map[*Backend]struct{}{},
		stop:       make(chan struct{}),
		kick:       make(chan struct{}, 1),
	}
	s.wg.Add(1)
	go s.reaper()
	return s
}

// Close closes every client of the store (as Backend.Close does) and stops
// its timers. It is idempotent. Clients made after Close are closed from
// the start.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	clients := make([]*Backend, 0, len(s.clients))
	for c := range s.clients {
		clients = append(clients, c)
	}
	s.mu.Unlock()
	for _, c := range clients {
		c.Close()
	}
	close(s.stop)
	s.wg.Wait()
	return nil
}

// Revision returns the latest committed revision (0 before any write).
func (s *Store) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

// Compact drops the change history up to and including rev (capped at the
// current revision): a later watch from a revision <= rev fails with
// core.ErrCompacted, and a watch still delivering such revisions ends with
// a core.ErrCompacted response. It is a test hook.
func (s *Store) Compact(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev > s.rev {
		rev = s.rev
	}
	if rev <= s.compacted {
		return
	}
	s.history = s.history[rev-s.compacted:]
	s.compacted = rev
	s.signalLocked()
}

// CompactedRevision returns the newest revision no longer in the history
// (0 when nothing was dropped).
func (s *Store) CompactedRevision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.compacted
}

func (s *Store) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Store) newIDLocked() int64 {
	s.nextID++
	return s.nextID
}

func (s *Store) kickReaper() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// reaper expires sessions and leases whose deadline passed.
func (s *Store) reaper() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	for {
		s.mu.Lock()
		now := s.opts.Now()
		next := now.Add(time.Second)
		for _, se := range s.sessions {
			if !now.Before(se.deadline) {
				s.expireSessionLocked(se)
			} else if se.deadline.Before(next) {
				next = se.deadline
			}
		}
		for _, l := range s.leases {
			if !now.Before(l.deadline) {
				s.endLeaseLocked(l)
			} else if l.deadline.Before(next) {
				next = l.deadline
			}
		}
		s.mu.Unlock()
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next.Sub(now) + time.Millisecond)
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-timer.C:
		}
	}
}

// statLocked builds a node's stat.
func (s *Store) statLocked(path string, n *node) core.Stat {
	return core.Stat{
		Version:        n.version,
		CreateRevision: n.createRev,
		ModifyRevision: n.modRev,
		CreateTime:     n.ctime,
		ModifyTime:     n.mtime,
		EphemeralOwner: n.owner,
		NumChildren:    int32(len(s.children[path])),
		DataLength:     int32(len(n.data)),
		// The root's children first changed at a revision above 0.
		ChildrenRevision: max(n.childRev, n.createRev),
	}
}

func (s *Store) childNamesLocked(path string) []string {
	m := s.children[path]
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// appendHistoryLocked records a committed revision and trims the history
// to the retention.
func (s *Store) appendHistoryLocked(rev int64, events []core.WatchEvent) {
	s.history = append(s.history, histEntry{rev: rev, events: events})
	if over := len(s.history) - s.opts.HistoryRetention; over > 0 {
		s.history = s.history[over:]
		s.compacted += int64(over)
	}
	s.signalLocked()
}
