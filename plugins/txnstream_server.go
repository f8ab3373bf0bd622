package plugins

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/internal/protocodec"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// txnStreamOff makes TxnStream answer Unimplemented, as a plugin built
// before it does (tests of the host's fallback to the unary Txn).
var txnStreamOff atomic.Bool

// TxnStream serves the Txn calls of one host connection (see the proto).
// Each call runs on a goroutine of the stream's callWorkers through the
// unary handler's txn, with the caller's deadline; replies are sent as
// they complete, the ones that complete while a send is in progress
// together in the next message. When the host ends the stream (or its
// connection breaks), calls still running are cancelled, as unary calls
// are when their stream is reset.
func (s *server) TxnStream(stream pb.Backend_TxnStreamServer) error {
	if txnStreamOff.Load() {
		return asIs(status.Error(codes.Unimplemented, "method TxnStream not implemented"))
	}
	ctx, cancelAll := context.WithCancel(stream.Context())
	out := &replyQueue{kick: make(chan struct{}, 1)}
	sendDone := make(chan error, 1)
	go func() { sendDone <- out.pump(ctx, stream.Send) }()
	sent := false // the sender has stopped

	var mu sync.Mutex
	running := map[uint64]context.CancelFunc{}
	workers := newCallWorkers(ctx.Done())
	defer func() {
		cancelAll()
		workers.wait()
		if !sent {
			<-sendDone // no Send after the handler returns
		}
	}()
	for {
		m, err := stream.Recv()
		if err != nil {
			// The host closed its side or the connection broke: nobody
			// reads the replies any more.
			return nil
		}
		mu.Lock()
		for _, call := range m.Calls {
			cctx, cancel := callContext(ctx, call)
			running[call.Id] = cancel
			workers.run(func() {
				r := &pb.TxnReply{Id: call.Id}
				resp, err := s.txn(cctx, call.Request)
				if err != nil {
					// What ToStatus puts in the unary call's status.
					r.Error = ErrorToProto(err)
					r.Code, r.Message = int32(codeOf(r.Error.Sentinel)), err.Error()
				} else {
					r.Response = resp
				}
				mu.Lock()
				delete(running, call.Id)
				mu.Unlock()
				cancel()
				out.push(r)
			})
		}
		for _, id := range m.Cancel {
			if cancel, ok := running[id]; ok {
				cancel()
			}
		}
		mu.Unlock()
		select {
		case err := <-sendDone:
			sent = true
			return err
		default:
		}
	}
}

// callContext is the context call runs with: the stream's, bounded by the
// caller's deadline, ended before the call when the caller's had ended
// (pass-through clients; the unary handler reads it from the metadata as
// it does for a unary call).
func callContext(ctx context.Context, call *pb.TxnCall) (context.Context, context.CancelFunc) {
	if call.ContextEnded != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(mdContextEnded, call.ContextEnded))
	}
	if call.DeadlineUnixNano != 0 {
		return context.WithDeadline(ctx, time.Unix(0, call.DeadlineUnixNano))
	}
	return context.WithCancel(ctx)
}

// maxBatchBytes bounds one TxnStream message (either way) as far as the
// messages it holds allow: a call or reply larger than this goes alone.
const maxBatchBytes = 4 << 20

// replyQueue collects the replies of one stream for its sender.
type replyQueue struct {
	mu      sync.Mutex
	pending []*pb.TxnReply
	kick    chan struct{}
}

func (q *replyQueue) push(r *pb.TxnReply) {
	q.mu.Lock()
	q.pending = append(q.pending, r)
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// pump sends the queued replies until ctx ends or a send fails.
func (q *replyQueue) pump(ctx context.Context, send func(*pb.TxnStreamResponse) error) error {
	return pumpBatches(ctx, q.kick, func() (bool, error) {
		q.mu.Lock()
		batch, rest := takeBatch(q.pending, func(r *pb.TxnReply) int { return protocodec.Size(r) })
		q.pending = rest
		q.mu.Unlock()
		if len(batch) == 0 {
			return false, nil
		}
		return true, send(&pb.TxnStreamResponse{Replies: batch})
	})
}

// pumpBatches is the sending loop of both ends of TxnStream: each time
// kick fires it lets the goroutines ready to queue theirs do so, then
// calls sendOne (which sends one message of what is queued and reports
// whether there was anything) until the queue is empty. It returns nil
// when ctx ends, or sendOne's error.
func pumpBatches(ctx context.Context, kick <-chan struct{}, sendOne func() (sent bool, err error)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		}
		runtime.Gosched()
		for {
			sent, err := sendOne()
			if err != nil {
				return err
			}
			if !sent {
				break
			}
		}
	}
}

// takeBatch splits the head of items that fits maxBatchBytes (at least
// one) from the rest.
func takeBatch[T any](items []T, size func(T) int) (batch, rest []T) {
	total := 0
	for i, it := range items {
		total += size(it)
		if i > 0 && total > maxBatchBytes {
			return items[:i:i], items[i:]
		}
	}
	return items, nil
}
