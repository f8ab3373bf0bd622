package adminclient

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// fakeAdmin answers CreateDatabase (an exactly-once write),
// TransferRaftLeadership (a write without request ids) and ListDatabases
// (a read) with the errors queued for them (nil: success; once the queue
// is empty, the last entry again), counting the calls and keeping the
// request ids the writes carried.
type fakeAdmin struct {
	adminv1.UnimplementedAdminServiceServer
	mu            sync.Mutex
	writes, reads []error
	nWrite, nRead atomic.Int32
	hang          bool // the writes block until their ctx ends
	ids           []string
}

func (f *fakeAdmin) write(ctx context.Context) error {
	f.nWrite.Add(1)
	f.mu.Lock()
	md, _ := metadata.FromIncomingContext(ctx)
	f.ids = append(f.ids, strings.Join(md.Get(adminapi.RequestIDHeader), ","))
	f.mu.Unlock()
	if f.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return adminapi.ToStatus(next(&f.writes))
}

func (f *fakeAdmin) requestIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

func (f *fakeAdmin) TransferRaftLeadership(ctx context.Context, _ *adminv1.TransferRaftLeadershipRequest) (*adminv1.TransferRaftLeadershipResponse, error) {
	return &adminv1.TransferRaftLeadershipResponse{}, f.write(ctx)
}

func next(q *[]error) error {
	e := (*q)[0]
	if len(*q) > 1 {
		*q = (*q)[1:]
	}
	return e
}

func (f *fakeAdmin) CreateDatabase(ctx context.Context, _ *adminv1.CreateDatabaseRequest) (*adminv1.CreateDatabaseResponse, error) {
	return &adminv1.CreateDatabaseResponse{}, f.write(ctx)
}

func (f *fakeAdmin) ListDatabases(ctx context.Context, _ *adminv1.ListDatabasesRequest) (*adminv1.ListDatabasesResponse, error) {
	f.nRead.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return &adminv1.ListDatabasesResponse{}, adminapi.ToStatus(next(&f.reads))
}

func serveFake(t *testing.T, f adminv1.AdminServiceServer) (addr string, stop func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	adminv1.RegisterAdminServiceServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String(), s.Stop
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func testClient(t *testing.T, addrs ...string) *Client {
	c, err := NewClient(addrs)
	if err != nil {
		t.Fatal(err)
	}
	c.RetryWait = 10 * time.Millisecond
	t.Cleanup(func() { c.Close() })
	return c
}

func create(ctx context.Context, c *Client) error {
	return c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db"})
		return err
	})
}

// transfer is a write without request ids.
func transfer(ctx context.Context, c *Client) error {
	return c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.TransferRaftLeadership(ctx, &adminv1.TransferRaftLeadershipRequest{})
		return err
	})
}

func list(ctx context.Context, c *Client) error {
	return c.Admin(ctx, func(ctx context.Context, a adminv1.AdminServiceClient) error {
		_, err := a.ListDatabases(ctx, &adminv1.ListDatabasesRequest{})
		return err
	})
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestDoNeverRepeatsAnAmbiguousWrite: a write without request ids
// answered UNAVAILABLE (outcome UNKNOWN) is sent once and reported as
// outcome unknown; a read answered so is retried.
func TestDoNeverRepeatsAnAmbiguousWrite(t *testing.T) {
	f := &fakeAdmin{writes: []error{core.ErrUnavailable, nil}, reads: []error{core.ErrUnavailable, nil}}
	addr, _ := serveFake(t, f)
	c := testClient(t, addr)
	err := transfer(ctxFor(t, 10*time.Second), c)
	var ou *OutcomeUnknownError
	if !errors.As(err, &ou) || !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, core.ErrUnavailable) || ou.Address != addr {
		t.Fatalf("got %v, want an OutcomeUnknownError wrapping ErrUnavailable from %s", err, addr)
	}
	if !strings.Contains(err.Error(), "TransferRaftLeadership was sent to "+addr) {
		t.Errorf("message %q does not name the call and the coordinator", err)
	}
	if n := f.nWrite.Load(); n != 1 {
		t.Errorf("the write was sent %d times, want 1", n)
	}
	if err := list(ctxFor(t, 10*time.Second), c); err != nil || f.nRead.Load() != 2 {
		t.Errorf("read: %v after %d calls, want success after 2", err, f.nRead.Load())
	}
}

// TestDoRepeatsAnAmbiguousExactlyOnceWrite: an exactly-once write answered
// UNAVAILABLE (outcome UNKNOWN) is repeated with the same request id, and
// a second call gets a new id; WithRequestID's id is used when given.
func TestDoRepeatsAnAmbiguousExactlyOnceWrite(t *testing.T) {
	f := &fakeAdmin{writes: []error{core.ErrUnavailable, core.ErrUnavailable, nil}}
	addr, _ := serveFake(t, f)
	c := testClient(t, addr)
	if err := create(ctxFor(t, 10*time.Second), c); err != nil || f.nWrite.Load() != 3 {
		t.Fatalf("got %v after %d sends, want success after 3", err, f.nWrite.Load())
	}
	if err := create(ctxFor(t, 10*time.Second), c); err != nil {
		t.Fatal(err)
	}
	if err := create(WithRequestID(ctxFor(t, 10*time.Second), "mine"), c); err != nil {
		t.Fatal(err)
	}
	ids := f.requestIDs()
	if len(ids) != 5 || ids[0] == "" || ids[1] != ids[0] || ids[2] != ids[0] || ids[3] == ids[0] || ids[3] == "" || ids[4] != "mine" {
		t.Fatalf("request ids sent %q: want one id for the three attempts, a new one for the next call, then \"mine\"", ids)
	}
}

// TestDoCallWithTwoWritesGivesEachItsID: a call that makes two
// exactly-once writes sends them with two ids, the same in every attempt.
func TestDoCallWithTwoWritesGivesEachItsID(t *testing.T) {
	f := &fakeAdmin{writes: []error{nil, core.ErrUnavailable, nil}}
	addr, _ := serveFake(t, f)
	c := testClient(t, addr)
	err := c.Admin(WithRequestID(ctxFor(t, 10*time.Second), "two"), func(ctx context.Context, a adminv1.AdminServiceClient) error {
		for range 2 {
			if _, err := a.CreateDatabase(ctx, &adminv1.CreateDatabaseRequest{Name: "db"}); err != nil {
				return err
			}
		}
		return nil
	})
	if ids := f.requestIDs(); err != nil || strings.Join(ids, " ") != "two two.1 two two.1" {
		t.Fatalf("got %v, ids %q: want ids two, two.1, repeated in the second attempt", err, ids)
	}
}

// TestDoRepeatsAWriteKnownNotApplied: a write answered with outcome
// NOT_APPLIED (CLOSED) is repeated, and so is one whose coordinator
// answered NOT_LEADER naming another.
func TestDoRepeatsAWriteKnownNotApplied(t *testing.T) {
	f := &fakeAdmin{writes: []error{core.ErrClosed, nil}}
	addr, _ := serveFake(t, f)
	if err := create(ctxFor(t, 10*time.Second), testClient(t, addr)); err != nil || f.nWrite.Load() != 2 {
		t.Fatalf("got %v after %d sends, want success after 2", err, f.nWrite.Load())
	}

	leader := &fakeAdmin{writes: []error{nil}}
	leaderAddr, _ := serveFake(t, leader)
	standby := &fakeAdmin{writes: []error{&core.NotLeaderError{LeaderID: "l", LeaderAddress: "CLIENT://" + leaderAddr}}}
	standbyAddr, _ := serveFake(t, standby)
	c := testClient(t, standbyAddr)
	if err := create(ctxFor(t, 10*time.Second), c); err != nil || leader.nWrite.Load() != 1 || c.Leader() != leaderAddr {
		t.Fatalf("redirect: %v, leader sent %d, client leader %q", err, leader.nWrite.Load(), c.Leader())
	}
}

// TestDoFollowsRedirectsUntilTheDeadline: a standby that keeps naming a
// dead leader is asked again and again (far more than ten times) until the
// call's deadline, and the error says no leader answered; the write was
// never sent to the dead leader, so its outcome is not unknown.
func TestDoFollowsRedirectsUntilTheDeadline(t *testing.T) {
	standby := &fakeAdmin{writes: []error{&core.NotLeaderError{LeaderID: "gone", LeaderAddress: deadAddr(t)}}}
	addr, _ := serveFake(t, standby)
	c := testClient(t, addr)
	// More than the ten attempts a count would have allowed, however slow
	// the machine: the call is still going, then ends with its context.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- create(ctx, c) }()
	testutil.WaitFor(t, 50*time.Second, "more than 10 attempts on the standby", func() bool { return standby.nWrite.Load() > 10 })
	select {
	case err := <-done:
		t.Fatalf("gave up after %d attempts, before its context ended: %v", standby.nWrite.Load(), err)
	default:
	}
	cancel()
	// Ended by its context: a deadline-style error naming the standby's
	// answer, or, when the cancel caught a write in flight to the standby,
	// outcome unknown (TestDoWriteInFlightAtTheDeadlineIsUnknown).
	err := <-done
	if !(errors.Is(err, context.Canceled) && strings.Contains(err.Error(), "no coordinator leader answered")) && !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("got %v, want the context's error saying no leader answered", err)
	}
}

// TestDoWriteWithoutConnectionIsNotUnknown: a write to an address nothing
// listens on is never sent; at the deadline it is a plain timeout.
func TestDoWriteWithoutConnectionIsNotUnknown(t *testing.T) {
	err := create(ctxFor(t, time.Second), testClient(t, deadAddr(t)))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("got %v, want a deadline error, outcome known (not sent)", err)
	}
}

// TestDoWriteInFlightAtTheDeadlineIsUnknown: a write still unanswered when
// the deadline passes may have been applied.
func TestDoWriteInFlightAtTheDeadlineIsUnknown(t *testing.T) {
	f := &fakeAdmin{hang: true}
	addr, _ := serveFake(t, f)
	err := create(ctxFor(t, 500*time.Millisecond), testClient(t, addr))
	if !errors.Is(err, ErrOutcomeUnknown) || f.nWrite.Load() < 1 {
		t.Fatalf("got %v after %d sends, want outcome unknown", err, f.nWrite.Load())
	}
	f2 := &fakeAdmin{hang: true}
	addr2, _ := serveFake(t, f2)
	err = transfer(ctxFor(t, 500*time.Millisecond), testClient(t, addr2))
	if !errors.Is(err, ErrOutcomeUnknown) || f2.nWrite.Load() != 1 {
		t.Fatalf("write without request ids: got %v after %d sends, want outcome unknown after 1", err, f2.nWrite.Load())
	}
}

// TestDoWriteLosingItsConnectionIsUnknown: a coordinator that goes away
// under a write without request ids leaves its outcome unknown, and the
// write is not repeated elsewhere; an exactly-once write is repeated on
// the other coordinator with the same request id.
func TestDoWriteLosingItsConnectionIsUnknown(t *testing.T) {
	loseConnection(t, transfer, func(t *testing.T, err error, first, other *fakeAdmin) {
		if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want outcome unknown (connection lost)", err)
		}
		if n := other.nWrite.Load(); n != 0 {
			t.Errorf("the write was repeated on the other coordinator (%d times)", n)
		}
	})
	loseConnection(t, create, func(t *testing.T, err error, first, other *fakeAdmin) {
		if err != nil {
			t.Fatalf("exactly-once write: %v, want the repetition on the other coordinator to answer", err)
		}
		a, b := first.requestIDs(), other.requestIDs()
		if len(a) != 1 || len(b) != 1 || a[0] == "" || a[0] != b[0] {
			t.Fatalf("request ids %q then %q: want the same id on both", a, b)
		}
	})
}

func loseConnection(t *testing.T, write func(context.Context, *Client) error, check func(t *testing.T, err error, first, other *fakeAdmin)) {
	f := &fakeAdmin{hang: true}
	addr, stop := serveFake(t, f)
	other := &fakeAdmin{writes: []error{nil}}
	otherAddr, _ := serveFake(t, other)
	c := testClient(t, addr, otherAddr)
	done := make(chan error, 1)
	go func() { done <- write(ctxFor(t, 10*time.Second), c) }()
	for f.nWrite.Load() == 0 {
		select {
		case err := <-done:
			t.Fatalf("returned before the write arrived: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	stop()
	check(t, <-done, f, other)
}
