package plugins

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/internal/protocodec"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// The host's side of TxnStream (see the proto): one stream per plugin
// connection carries the Txn calls of every client on it. A call is queued
// and the connection's sender sends everything queued in one message, so
// that writers calling at the same moment share a message each way instead
// of one unary call each (a unary call costs both processes a gRPC stream
// of its own: its headers, its goroutines, its system calls). A lone
// caller's call goes at once, alone: nothing waits to fill a batch.

// txnStreamHostOff makes the host use the unary Txn only (benchmarks
// comparing the two).
var txnStreamHostOff atomic.Bool

// txnMux is a connection's TxnStream, opened at its first call.
type txnMux struct {
	cn *conn

	mu     sync.Mutex
	off    bool          // the plugin does not implement TxnStream
	stream *txnStreamRun // nil: none open
	nextID uint64
	sent   atomic.Int64 // messages sent (tests)
	calls  atomic.Int64 // calls sent (tests)
}

// txnStreamRun is one opened stream. Its fields are guarded by the mux's
// mu.
type txnStreamRun struct {
	s       pb.Backend_TxnStreamClient
	cancel  context.CancelFunc
	pending map[uint64]chan txnOutcome // calls sent or queued, awaiting a reply
	queue   []*pb.TxnCall              // calls not sent yet
	cancels []uint64                   // sent calls whose caller stopped waiting
	kick    chan struct{}
	replied bool // a reply came: the plugin implements the stream
	done    bool
}

type txnOutcome struct {
	resp *pb.TxnResponse
	err  error
	// unary: the plugin does not implement the stream and did not run the
	// call: make it a unary call.
	unary bool
}

func (cn *conn) txnMux() *txnMux {
	cn.txnOnce.Do(func() { cn.txns = &txnMux{cn: cn} })
	return cn.txns
}

// do runs req on the stream. ok is false when the call must be made unary
// instead (the plugin does not implement the stream; the call was not
// run). ended is the pass-through ended-context mark ("" for none). A call
// whose ctx ends first returns ctx's status error (the write, already
// sent, may still apply, as with a cancelled unary call).
func (m *txnMux) do(ctx context.Context, req *pb.TxnRequest, ended string) (resp *pb.TxnResponse, err error, ok bool) {
	if txnStreamHostOff.Load() {
		return nil, nil, false
	}
	m.mu.Lock()
	if m.off {
		m.mu.Unlock()
		return nil, nil, false
	}
	st := m.stream
	if st == nil {
		sctx, cancel := context.WithCancel(m.cn.ctx)
		s, err := m.cn.rpc.TxnStream(sctx)
		if err != nil {
			cancel()
			if status.Code(err) == codes.Unimplemented {
				m.off = true
				m.mu.Unlock()
				return nil, nil, false
			}
			m.mu.Unlock()
			return nil, err, true
		}
		st = &txnStreamRun{s: s, cancel: cancel, pending: map[uint64]chan txnOutcome{}, kick: make(chan struct{}, 1)}
		m.stream = st
		go m.send(sctx, st)
		go m.receive(st)
	}
	m.nextID++
	call := &pb.TxnCall{Id: m.nextID, Request: req, ContextEnded: ended}
	if d, has := ctx.Deadline(); has {
		call.DeadlineUnixNano = d.UnixNano()
	}
	ch := make(chan txnOutcome, 1)
	st.pending[call.Id] = ch
	st.queue = append(st.queue, call)
	m.mu.Unlock()
	st.wake()

	select {
	case o := <-ch:
		return o.resp, o.err, !o.unary
	case <-ctx.Done():
	}
	m.mu.Lock()
	if _, waiting := st.pending[call.Id]; waiting {
		delete(st.pending, call.Id)
		queued := false
		for i, q := range st.queue {
			if q == call {
				st.queue = append(st.queue[:i:i], st.queue[i+1:]...)
				queued = true
				break
			}
		}
		if !queued {
			st.cancels = append(st.cancels, call.Id)
		}
	}
	m.mu.Unlock()
	st.wake()
	select {
	case o := <-ch: // answered while the caller gave up
		return o.resp, o.err, !o.unary
	default:
	}
	return nil, status.FromContextError(ctx.Err()).Err(), true
}

func (st *txnStreamRun) wake() {
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// send sends what is queued on st, all of it in one message as far as
// maxBatchBytes allows, until st ends. A failed send ends the stream,
// which receive reports to the calls.
func (m *txnMux) send(ctx context.Context, st *txnStreamRun) {
	_ = pumpBatches(ctx, st.kick, func() (bool, error) {
		m.mu.Lock()
		if st.done {
			m.mu.Unlock()
			return false, errStreamEnded
		}
		batch, rest := takeBatch(st.queue, func(c *pb.TxnCall) int { return protocodec.Size(c) })
		st.queue = rest
		cancels := st.cancels
		st.cancels = nil
		m.mu.Unlock()
		if len(batch) == 0 && len(cancels) == 0 {
			return false, nil
		}
		if err := st.s.Send(&pb.TxnStreamRequest{Calls: batch, Cancel: cancels}); err != nil {
			return false, err // the stream is over; receive sees why
		}
		m.sent.Add(1)
		m.calls.Add(int64(len(batch)))
		return true, nil
	})
}

// errStreamEnded stops a sender whose stream end has closed.
var errStreamEnded = errors.New("txn stream ended")

// receive hands the replies to their calls until st ends, then fails the
// calls still waiting with the stream's error.
func (m *txnMux) receive(st *txnStreamRun) {
	for {
		msg, err := st.s.Recv()
		if err != nil {
			m.end(st, err)
			return
		}
		m.mu.Lock()
		st.replied = true
		for _, r := range msg.Replies {
			if ch, ok := st.pending[r.Id]; ok {
				delete(st.pending, r.Id)
				ch <- outcomeOf(r)
			}
		}
		m.mu.Unlock()
	}
}

// end closes st after its stream failed with err: the calls still
// waiting get err (the next call opens a new stream), or are made unary
// when the plugin turned out not to implement the stream.
func (m *txnMux) end(st *txnStreamRun, err error) {
	m.mu.Lock()
	st.done = true
	if m.stream == st {
		m.stream = nil
	}
	unary := status.Code(err) == codes.Unimplemented && !st.replied
	if unary {
		m.off = true
	}
	for id, ch := range st.pending {
		delete(st.pending, id)
		ch <- txnOutcome{err: err, unary: unary}
	}
	st.queue, st.cancels = nil, nil
	m.mu.Unlock()
	st.cancel()
	st.wake()
}

// outcomeOf turns a reply into what the unary Txn would have returned:
// the error from its Error detail as FromStatus makes it (callError leaves
// an error that is no status as it is), or from the code alone.
func outcomeOf(r *pb.TxnReply) txnOutcome {
	switch {
	case r.Error != nil:
		return txnOutcome{err: ErrorFromProto(r.Error)}
	case r.Code != int32(codes.OK):
		return txnOutcome{err: status.Error(codes.Code(r.Code), r.Message)}
	case r.Response == nil:
		return txnOutcome{resp: &pb.TxnResponse{}}
	}
	return txnOutcome{resp: r.Response}
}
