package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// The client library (go-zookeeper) does not expose two facts the backend
// needs: the zxid of the responses it reads (the store's revision), and the
// session password (to expire the session on demand, the standard
// technique). A dialer wrapper reads them off the byte stream the library
// reads, without changing it: every packet is a 4-byte big-endian length
// and a body; a connection's first body is the connect response
// (protocolVersion int32, timeout int32, sessionId int64, passwd buffer),
// every later one starts with the reply header (xid int32, zxid int64, err
// int32). The tap can also write a request of the backend's own between
// the library's packets (inject: the streamed snapshot's addWatch, a call
// the library lacks; call: a multi whose reply's zxid the backend needs),
// and hands the reply to the backend.

// wireState is what the taps of one client saw, across its connections.
type wireState struct {
	lastZxid atomic.Int64
	lastRead atomic.Int64 // unix nanoseconds of the last bytes received
	dials    atomic.Int64 // connection attempts made
	timeout  atomic.Int64 // the negotiated session timeout, milliseconds

	// replies, when set, receives each reply to a request this package
	// wrote itself (inject) that no call waits for.
	replies func(r reply)
	// events, when set, receives each watch notification (xid -1) as the
	// tap reads it: before any reply read after it is handed to a call
	// (the library's event callback comes later than that). Set it
	// before the first dial.
	events func(typ zk.EventType, zpath string)

	mu        sync.Mutex
	sessionID int64
	passwd    []byte
	cur       net.Conn               // the latest connection
	calls     map[int32]*pendingCall // calls waiting for their reply, by xid
	nextXid   int32                  // the last xid call used (counting down)
}

// reply is the answer to a request this package wrote itself.
type reply struct {
	xid  int32
	zxid int64
	err  int32  // the reply header's error code
	body []byte // what follows the reply header (only for a call)
	lost bool   // the connection closed before the reply came
}

// pendingCall is a call waiting for its reply on connection conn.
type pendingCall struct {
	conn *tapConn
	ch   chan reply
}

// Injected requests use xids below firstCallXid (counting down, wrapping
// before they could reach the library's -1 and -2): the library counts
// its own up from 1, and snapWatchXid is above.
const (
	firstCallXid = -1000
	lastCallXid  = -1 << 30
)

// maxCallReply bounds the reply body a call keeps: a multi answers at
// most a header and a path or a stat (68 bytes) per op, far below this for
// any request within ZooKeeper's request limit.
const maxCallReply = 4 << 20

// errNotSent: there was no established connection to write a call on;
// nothing was sent.
var errNotSent = errors.New("zookeeper: no established connection")

// errReplyLost: the connection closed after a call was written and before
// its reply came; the request may or may not have been applied.
var errReplyLost = errors.New("zookeeper: the connection was lost before the reply came")

// dropConn closes the current connection; the library reconnects.
func (w *wireState) dropConn() {
	w.mu.Lock()
	c := w.cur
	w.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

func (w *wireState) noteZxid(z int64) {
	for {
		cur := w.lastZxid.Load()
		if z <= cur || w.lastZxid.CompareAndSwap(cur, z) {
			return
		}
	}
}

func (w *wireState) session() (int64, []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sessionID, append([]byte(nil), w.passwd...)
}

// dialer returns a go-zookeeper Dialer whose connections are tapped.
func (w *wireState) dialer() func(network, address string, timeout time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		w.dials.Add(1)
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		tc := &tapConn{Conn: c, w: w, first: true}
		w.mu.Lock()
		w.cur = tc
		w.mu.Unlock()
		return tc, nil
	}
}

// tapConn parses the packets read through it. Only the library's receive
// goroutine reads a connection, so it needs no lock.
type tapConn struct {
	net.Conn
	w   *wireState
	wmu sync.Mutex // one packet written at a time (the library's or inject's)
	// wroteConnect: the library's connect request went out (under wmu).
	wroteConnect bool

	first  bool    // the next body is the connect response
	lenBuf [4]byte // length prefix being read
	lenN   int
	remain int      // bytes of the current body still to come
	head   [48]byte // the body's first bytes
	headN  int
	want   int    // how many head bytes to keep of this body
	rest   []byte // the rest of a call's reply body
	keep   bool   // this body is a call's reply: keep it whole

	// ready: the connect response was read, so the library's connect
	// request went before anything written now. dead: the connection
	// failed or closed (both under w.mu).
	ready, dead bool
}

// Write writes one of the library's packets (it writes each whole, in one
// call), never in the middle of an injected one.
//
// The first is the connect request (length, protocolVersion int32,
// lastZxidSeen int64, ...): its lastZxidSeen is raised to the last zxid
// the tap has read, when it resumes a session. The library counts only
// the replies to its own requests, not those to the requests the backend
// wrote itself (every transaction: see call), and a server refuses a
// client that has seen a later zxid than its own: so a client that
// reconnects never lands on a server that has not yet applied a
// transaction it acknowledged.
func (t *tapConn) Write(p []byte) (int, error) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if !t.wroteConnect {
		t.wroteConnect = true
		// Only within a session (sessionId at [20:28] set): a new session
		// may meet an ensemble started over, whose zxids began again.
		if len(p) >= 28 && binary.BigEndian.Uint64(p[20:28]) != 0 {
			seen := int64(binary.BigEndian.Uint64(p[8:16]))
			if z := t.w.lastZxid.Load(); z > seen {
				q := append([]byte(nil), p...)
				binary.BigEndian.PutUint64(q[8:16], uint64(z))
				n, err := t.Conn.Write(q)
				return min(n, len(p)), err
			}
		}
	}
	return t.Conn.Write(p)
}

// inject writes a request of this package's own on the current
// connection, between two of the library's packets: body is the request
// header (xid, opcode) and the request. Its xid must be negative and
// neither -1 (notifications) nor -2 (pings): the library drops a reply
// with such an xid, and the tap hands it to replies.
func (w *wireState) inject(body []byte) error {
	w.mu.Lock()
	c, _ := w.cur.(*tapConn)
	ok := c != nil && c.ready && !c.dead
	w.mu.Unlock()
	if !ok {
		return errNotSent
	}
	return c.writeBody(body)
}

func (t *tapConn) writeBody(body []byte) error {
	pkt := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	pkt = append(pkt, body...)
	t.wmu.Lock()
	defer t.wmu.Unlock()
	_, err := t.Conn.Write(pkt)
	return err
}

// call writes a request of this package's own (header: a fresh xid from
// callXid, then opcode; body: the request after the header) on the
// current connection and waits for its reply. It answers errNotSent when
// there was no established connection (nothing was sent), and
// errReplyLost or the write's error when the connection failed after the
// request may have gone out (its outcome is unknown). The reply comes on
// the connection the request went on, in order with the library's
// replies: the server answers a session's requests in the order it
// received them.
func (w *wireState) call(ctx context.Context, opcode int32, req []byte) (reply, error) {
	ch := make(chan reply, 1)
	w.mu.Lock()
	c, _ := w.cur.(*tapConn)
	if c == nil || !c.ready || c.dead {
		w.mu.Unlock()
		return reply{}, errNotSent
	}
	w.nextXid--
	if w.nextXid > firstCallXid || w.nextXid < lastCallXid {
		w.nextXid = firstCallXid
	}
	xid := w.nextXid
	if w.calls == nil {
		w.calls = map[int32]*pendingCall{}
	}
	w.calls[xid] = &pendingCall{conn: c, ch: ch}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.calls, xid)
		w.mu.Unlock()
	}()
	body := binary.BigEndian.AppendUint32(make([]byte, 0, 8+len(req)), uint32(xid))
	body = binary.BigEndian.AppendUint32(body, uint32(opcode))
	body = append(body, req...)
	if err := c.writeBody(body); err != nil {
		c.Close() // a partly written packet leaves the stream unusable
		return reply{}, fmt.Errorf("%w: %v", errReplyLost, err)
	}
	select {
	case r := <-ch:
		if r.lost {
			return reply{}, errReplyLost
		}
		return r, nil
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
}

// lost marks t failed and answers every call still waiting on it.
func (t *tapConn) lost() {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	if t.dead {
		return
	}
	t.dead = true
	for _, pc := range t.w.calls {
		if pc.conn == t {
			select {
			case pc.ch <- reply{lost: true}:
			default:
			}
		}
	}
}

func (t *tapConn) Close() error {
	t.lost()
	return t.Conn.Close()
}

func (t *tapConn) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	if n > 0 {
		t.w.lastRead.Store(time.Now().UnixNano())
	}
	t.feed(p[:n])
	if err != nil {
		t.lost()
	}
	return n, err
}

func (t *tapConn) feed(b []byte) {
	for len(b) > 0 {
		if t.remain == 0 {
			k := copy(t.lenBuf[t.lenN:], b)
			t.lenN += k
			b = b[k:]
			if t.lenN < 4 {
				return
			}
			t.lenN = 0
			t.remain = int(binary.BigEndian.Uint32(t.lenBuf[:]))
			t.headN = 0
			t.rest = t.rest[:0]
			t.keep = false
			t.want = 16
			if t.first {
				t.want = len(t.head)
			}
			if t.want > t.remain {
				t.want = t.remain
			}
			if t.remain == 0 {
				t.first = false
			}
			continue
		}
		k := len(b)
		if k > t.remain {
			k = t.remain
		}
		chunk := b[:k]
		if t.headN < t.want {
			n := copy(t.head[t.headN:t.want], chunk)
			t.headN += n
			chunk = chunk[n:]
			if t.headN == 16 && !t.first {
				// A reply header: keep the whole body of a call's reply,
				// and of a notification when events wants them.
				xid := int32(binary.BigEndian.Uint32(t.head[0:4]))
				t.keep = (xid < -2 || xid == -1 && t.w.events != nil) && t.remain-n <= maxCallReply
			}
		}
		if t.keep && len(chunk) > 0 {
			t.rest = append(t.rest, chunk...)
		}
		b = b[k:]
		t.remain -= k
		if t.remain == 0 {
			t.packet()
		}
	}
}

// packet handles a complete body whose first headN bytes are in head.
func (t *tapConn) packet() {
	h := t.head[:t.headN]
	if t.first {
		t.first = false
		// protocolVersion(4) timeout(4) sessionId(8) passwdLen(4) passwd
		if len(h) < 20 {
			return
		}
		if ms := int32(binary.BigEndian.Uint32(h[4:8])); ms > 0 {
			t.w.timeout.Store(int64(ms))
		}
		sid := int64(binary.BigEndian.Uint64(h[8:16]))
		pl := int(int32(binary.BigEndian.Uint32(h[16:20])))
		if pl < 0 || 20+pl > len(h) {
			return
		}
		t.w.mu.Lock()
		t.w.sessionID = sid
		t.w.passwd = append([]byte(nil), h[20:20+pl]...)
		t.ready = sid != 0
		t.w.mu.Unlock()
		return
	}
	if len(h) < 12 {
		return
	}
	z := int64(binary.BigEndian.Uint64(h[4:12]))
	if z > 0 {
		t.w.noteZxid(z)
	}
	xid := int32(binary.BigEndian.Uint32(h[0:4]))
	if xid == -1 && t.keep && len(t.rest) >= 12 {
		// A notification: type int32, state int32, path.
		typ := zk.EventType(int32(binary.BigEndian.Uint32(t.rest[0:4])))
		if l := int(int32(binary.BigEndian.Uint32(t.rest[8:12]))); l >= 0 && len(t.rest) >= 12+l {
			t.w.events(typ, string(t.rest[12:12+l]))
		}
		return
	}
	if xid >= -2 || len(h) < 16 {
		return
	}
	r := reply{xid: xid, zxid: z, err: int32(binary.BigEndian.Uint32(h[12:16]))}
	t.w.mu.Lock()
	pc := t.w.calls[xid]
	t.w.mu.Unlock()
	if pc != nil && pc.conn == t {
		if !t.keep {
			r.lost = true // too large to keep: treated as an unknown outcome
		}
		r.body = append([]byte(nil), t.rest...)
		select {
		case pc.ch <- r:
		default:
		}
		return
	}
	if t.w.replies != nil {
		t.w.replies(r)
	}
}

// closeSession ends session sid on the server at addr by connecting with
// its id and password and sending closeSession: the server deletes the
// session's ephemerals and drops its other connection, whose client then
// learns that its session expired. This is what a session timeout does,
// without waiting for it.
func closeSession(addr string, sid int64, passwd []byte, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	// ConnectRequest: protocolVersion int32, lastZxidSeen int64, timeOut
	// int32, sessionId int64, passwd buffer, readOnly bool.
	body := make([]byte, 0, 64)
	body = binary.BigEndian.AppendUint32(body, 0)
	body = binary.BigEndian.AppendUint64(body, 0)
	body = binary.BigEndian.AppendUint32(body, uint32(timeout.Milliseconds()))
	body = binary.BigEndian.AppendUint64(body, uint64(sid))
	body = binary.BigEndian.AppendUint32(body, uint32(len(passwd)))
	body = append(body, passwd...)
	body = append(body, 0)
	if err := writePacket(c, body); err != nil {
		return err
	}
	resp, err := readPacket(c)
	if err != nil {
		return err
	}
	if len(resp) < 16 {
		return fmt.Errorf("short connect response (%d bytes)", len(resp))
	}
	if got := int64(binary.BigEndian.Uint64(resp[8:16])); got != sid {
		// Session id 0: the session is already gone.
		return nil
	}
	// closeSession: header xid int32, type int32 (-11).
	req := binary.BigEndian.AppendUint32(nil, 1)
	req = binary.BigEndian.AppendUint32(req, uint32(0xfffffff5))
	if err := writePacket(c, req); err != nil {
		return err
	}
	_, err = readPacket(c) // the reply, or EOF once the server closed it
	if err != nil && err != io.EOF {
		return err
	}
	return nil
}

func writePacket(c net.Conn, body []byte) error {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	_, err := c.Write(append(b, body...))
	return err
}

func readPacket(c net.Conn) ([]byte, error) {
	var l [4]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > 1<<20 {
		return nil, fmt.Errorf("packet of %d bytes", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	return b, err
}

// serverMode sends the `srvr` four-letter word to addr and returns the
// "Mode:" it reports.
func serverMode(addr string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("srvr")); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(c, 64<<10))
	if err != nil && len(b) == 0 {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("no mode in %q", firstLine(b))
}

func firstLine(b []byte) string {
	s := string(b)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
