package fsm

import raftv1 "github.com/metaplane/metaplane/proto/metaplane/raft/v1"

// nodeCache holds the stored record of recently written or read nodes, so
// that the next command touching one does not read it back from Pebble (an
// indexed batch Get and a decode: under many writers, the largest share of
// an entry's apply). It is exact: it holds a record only as the store holds
// it after the last committed Update.
//
//   - Update reads through it (txnState.get: the command's own overlay,
//     then the batch's written records, then the cache, then Pebble) and,
//     only once its batch is committed, puts every record the batch read
//     from Pebble and did not write, then every record it wrote, and drops
//     every node it deleted.
//   - A refused command writes nothing, so it changes nothing here.
//   - Open (a reopened store) and a snapshot's recovery, which replace what
//     the store holds without Update, empty it.
//
// Only Update (one goroutine: Dragonboat applies one replica's entries in
// order) and those two, which hold the state machine's lock exclusively,
// use it, so it needs no lock of its own. Queries read Pebble, not the
// cache. Records in it are never changed in place (txnState clones a
// record before it changes it).
type nodeCache struct {
	nodes map[string]*raftv1.NodeRecord
	bytes int // data bytes held

	maxNodes, maxBytes, maxData int // the bounds below (tests shrink them)
}

// Bounds: a node with more data than nodeCacheMaxData is not kept, and the
// cache holds at most nodeCacheMaxNodes records and nodeCacheMaxBytes of
// their data, so its memory is bounded whatever is written.
const (
	nodeCacheMaxNodes = 4096
	nodeCacheMaxBytes = 4 << 20
	nodeCacheMaxData  = 16 << 10
)

func newNodeCache() *nodeCache {
	return &nodeCache{nodes: map[string]*raftv1.NodeRecord{},
		maxNodes: nodeCacheMaxNodes, maxBytes: nodeCacheMaxBytes, maxData: nodeCacheMaxData}
}

func (c *nodeCache) get(p string) (*raftv1.NodeRecord, bool) {
	n, ok := c.nodes[p]
	return n, ok
}

// reset drops every record.
func (c *nodeCache) reset() {
	clear(c.nodes)
	c.bytes = 0
}

// drop forgets p.
func (c *nodeCache) drop(p string) {
	if old, ok := c.nodes[p]; ok {
		c.bytes -= len(old.GetData())
		delete(c.nodes, p)
	}
}

// put keeps n as p's stored record (n nil: p was deleted). A record too
// large to keep is dropped instead; room is made by forgetting records in
// the map's iteration order (arbitrary), enough of them to fit.
func (c *nodeCache) put(p string, n *raftv1.NodeRecord) {
	c.drop(p)
	if n == nil || len(n.GetData()) > c.maxData {
		return
	}
	for len(c.nodes) >= c.maxNodes || c.bytes+len(n.GetData()) > c.maxBytes {
		for q := range c.nodes {
			c.drop(q)
			break
		}
	}
	c.nodes[p] = n
	c.bytes += len(n.GetData())
}
