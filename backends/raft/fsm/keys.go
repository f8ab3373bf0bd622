package fsm

import "encoding/binary"

// The state machine's Pebble keyspace. Every key starts with a one-byte
// table tag:
//
//	n<path>                 NodeRecord of a node
//	c<parent>\x00<name>     empty: parent has child name (paths hold no NUL)
//	s<id:8>                 SessionRecord of a live session
//	e<id:8><path>           empty: the session owns the ephemeral path
//	l<index:8>              ChangeLogEntry of the changes at a log index
//	m<name>                 metadata: applied index, leader state, change
//	                        log floor
//
// Integers are 8-byte big-endian so that keys sort numerically.
const (
	tagNode     = 'n'
	tagChild    = 'c'
	tagSession  = 's'
	tagEph      = 'e'
	tagLog      = 'l'
	tagMeta     = 'm'
	tagAfterAll = 'z'
)

var (
	keyApplied  = []byte("mapplied")
	keyLeader   = []byte("mleader")
	keyLogFloor = []byte("mlogfloor")
)

func NodeKey(path string) []byte {
	k := make([]byte, 0, 1+len(path))
	k = append(k, tagNode)
	return append(k, path...)
}

func childKey(parent, name string) []byte {
	k := make([]byte, 0, 2+len(parent)+len(name))
	k = append(k, tagChild)
	k = append(k, parent...)
	k = append(k, 0)
	return append(k, name...)
}

// childPrefix is the prefix of parent's children keys.
func childPrefix(parent string) []byte {
	k := make([]byte, 0, 2+len(parent))
	k = append(k, tagChild)
	k = append(k, parent...)
	return append(k, 0)
}

func sessionKey(id int64) []byte {
	k := make([]byte, 9)
	k[0] = tagSession
	binary.BigEndian.PutUint64(k[1:], uint64(id))
	return k
}

func ephKey(id int64, path string) []byte {
	k := make([]byte, 9, 9+len(path))
	k[0] = tagEph
	binary.BigEndian.PutUint64(k[1:], uint64(id))
	return append(k, path...)
}

func ephPrefix(id int64) []byte {
	k := make([]byte, 9)
	k[0] = tagEph
	binary.BigEndian.PutUint64(k[1:], uint64(id))
	return k
}

func logKey(index int64) []byte {
	k := make([]byte, 9)
	k[0] = tagLog
	binary.BigEndian.PutUint64(k[1:], uint64(index))
	return k
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func PrefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
