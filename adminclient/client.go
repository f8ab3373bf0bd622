package adminclient

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/deadline"
	"github.com/metaplane/metaplane/internal/retry"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Client calls the coordinators' gRPC services, finding the leader among
// the coordinator addresses it knows (the bootstrap addresses, and those
// learned by Refresh) and following NOT_LEADER redirects. It is safe for
// concurrent use; Close it when done.
type Client struct {
	bootstrap []string
	// Timeout bounds one call (its redirects and retries included) whose
	// ctx has no deadline; default 30s. A ctx deadline bounds it otherwise.
	Timeout time.Duration
	// RetryWait is the pause before retrying when no leader is known;
	// default 200ms.
	RetryWait time.Duration
	// ConnectWait bounds how long a write waits for a connection to a
	// coordinator before it tries the next one; default 2s.
	ConnectWait time.Duration

	creds    credentials.TransportCredentials // of every connection
	perRPC   credentials.PerRPCCredentials    // the password of every call, or nil
	tlsFails *tlsFailures                     // permanent TLS failures by address (tlsfail.go)

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	leader  string   // last known leader address
	learned []string // addresses learned by Refresh, not in bootstrap
	stop    context.CancelFunc
	stopped chan struct{}
}

// Options configure a Client made with NewClientWithOptions.
type Options struct {
	// TLS, when set, is the TLS configuration of every connection (the
	// coordinators' CLIENT listener is mapped to SSL): its RootCAs verify
	// the coordinators' certificates, its Certificates or
	// GetClientCertificate give the client certificate. The server name
	// is each address's host unless TLS.ServerName is set. Nil: plaintext.
	// The client does not modify it; do not modify it after the call.
	TLS *tls.Config
	// RefreshInterval, when positive, makes the client call Refresh at
	// once and then every RefreshInterval in the background until Close,
	// so that a long-lived client given one reachable coordinator learns
	// the others (the coordinators' gossip, coordinator.gossip.enabled)
	// and keeps working when that one dies. 0: the client knows only its
	// bootstrap addresses unless Refresh is called.
	RefreshInterval time.Duration
	// Username and Password, when Username is set, go with every call
	// (gRPC metadata, see adminapi.PasswordCredentials) for a SASL_SSL listener.
	// They need TLS: NewClientWithOptions refuses them without it.
	Username, Password string
}

// NewClient returns a client for the coordinators at bootstrap (host:port
// addresses; listener prefixes like CLIENT:// are accepted), over
// plaintext connections. Errors: ErrInvalidArgument when bootstrap is
// empty.
func NewClient(bootstrap []string) (*Client, error) {
	return NewClientWithOptions(bootstrap, Options{})
}

// NewClientWithOptions is NewClient with options (TLS). Errors: as
// NewClient.
func NewClientWithOptions(bootstrap []string, opts Options) (*Client, error) {
	var addrs []string
	for _, b := range bootstrap {
		for _, a := range strings.Split(b, ",") {
			if a = adminapi.HostPort(strings.TrimSpace(a)); a != "" {
				addrs = append(addrs, a)
			}
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: no coordinator address given", core.ErrInvalidArgument)
	}
	fails := &tlsFailures{}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = &recordingCreds{TransportCredentials: credentials.NewTLS(opts.TLS), fails: fails}
	}
	c := &Client{bootstrap: addrs, Timeout: 30 * time.Second, RetryWait: 200 * time.Millisecond,
		ConnectWait: 2 * time.Second, creds: creds, tlsFails: fails, conns: map[string]*grpc.ClientConn{}}
	if opts.Username != "" {
		if opts.TLS == nil {
			return nil, fmt.Errorf("%w: a username and password are sent over TLS only: give a TLS configuration too", core.ErrInvalidArgument)
		}
		c.perRPC = adminapi.PasswordCredentials(opts.Username, opts.Password)
	}
	if opts.RefreshInterval > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		c.stop, c.stopped = cancel, make(chan struct{})
		go c.refreshLoop(ctx, opts.RefreshInterval)
	}
	return c, nil
}

// Coordinators returns the coordinator addresses (host:port) the client
// knows: the bootstrap addresses, then those learned by Refresh.
func (c *Client) Coordinators() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]string(nil), c.bootstrap...)
	return append(out, c.learned...)
}

// Refresh asks the coordinators the client knows, the last known leader
// first, for the coordinators they know (GetLeader's coordinators) and
// makes the first answer the client's learned addresses: an address the
// answer adds is used from now on, one it no longer lists (a coordinator
// gone from the gossip) is dropped. The bootstrap addresses are always
// kept. Errors: the last coordinator's error when none answers (the
// addresses are then left as they were).
func (c *Client) Refresh(ctx context.Context) error {
	known := c.Coordinators()
	if l := c.Leader(); l != "" {
		known = append([]string{l}, known...)
	}
	var lastErr error
	tried := map[string]bool{}
	for _, addr := range known {
		if tried[addr] || ctx.Err() != nil {
			continue
		}
		tried[addr] = true
		cctx, cancel := context.WithTimeout(ctx, c.ConnectWait)
		r, err := c.GetLeaderFrom(cctx, addr)
		cancel()
		if err != nil {
			lastErr = err
			continue
		}
		if len(r.Coordinators) == 0 {
			return nil // a coordinator that lists none: keep what is known
		}
		boot := map[string]bool{}
		for _, b := range c.bootstrap {
			boot[b] = true
		}
		var learned []string
		for _, ci := range r.Coordinators {
			if a := adminapi.HostPort(ci.Address); a != "" && !boot[a] {
				boot[a] = true
				learned = append(learned, a)
			}
		}
		c.mu.Lock()
		c.learned = learned
		c.mu.Unlock()
		return nil
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	return lastErr
}

func (c *Client) refreshLoop(ctx context.Context, every time.Duration) {
	defer close(c.stopped)
	for {
		c.Refresh(ctx) // a failure is retried at the next tick
		if !retry.Sleep(ctx, every) {
			return
		}
	}
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(c.creds)}
	if c.perRPC != nil {
		dopts = append(dopts, grpc.WithPerRPCCredentials(c.perRPC))
	}
	cc, err := grpc.NewClient(addr, dopts...)
	if err != nil {
		return nil, fmt.Errorf("%w: coordinator %s: %v", core.ErrInvalidArgument, addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// Leader returns the last known leader address ("" before the first call).
func (c *Client) Leader() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader
}

func (c *Client) setLeader(addr string) {
	c.mu.Lock()
	c.leader = addr
	c.mu.Unlock()
}

// DeadlineError is the error of a call whose deadline passed before a
// coordinator answered it for good; errors.Is(err,
// context.DeadlineExceeded) (or Canceled) holds for it.
type DeadlineError struct {
	Err         error  // ctx's error
	LastAnswer  error  // the last answer of a coordinator (NOT_LEADER, ...), converted; nil if none answered
	LastAddress string // who gave it
	Unreachable string // the last coordinator that could not be reached; "" if none
}

func (e *DeadlineError) Error() string {
	var b strings.Builder
	b.WriteString(e.Err.Error())
	if _, ok := errors.AsType[*core.NotLeaderError](e.LastAnswer); ok {
		b.WriteString(": no coordinator leader answered")
	}
	if e.LastAnswer != nil {
		fmt.Fprintf(&b, " (last answer from %s: %v)", e.LastAddress, e.LastAnswer)
	}
	if e.Unreachable != "" {
		fmt.Fprintf(&b, " (no connection to %s)", e.Unreachable)
	}
	return b.String()
}

// Unwrap returns ctx's error.
func (e *DeadlineError) Unwrap() error { return e.Err }

// ErrOutcomeUnknown is in the chain of a write's error when the write may or
// may not have been applied and Do could not settle it: an exactly-once
// write (adminapi.ExactlyOnce) whose repetitions with its request id got no answer
// for good before the deadline, or that was answered INTERNAL; another
// write that was sent and its answer lost (a connection that broke under
// it, the deadline) or answered with outcome UNKNOWN. Repeat an
// exactly-once write with the same request id (WithRequestID,
// OutcomeUnknownError.RequestID); read the state before repeating another.
var ErrOutcomeUnknown = errors.New("admin: outcome unknown")

// OutcomeUnknownError is ErrOutcomeUnknown with the coordinator the write
// was sent to and the error it ended with (errors.Is finds both).
type OutcomeUnknownError struct {
	Address string // host:port the write was sent to
	Method  string // the RPC, "/metaplane.admin.v1.AdminService/CreateTable"
	Err     error  // the last error, converted with adminapi.FromStatus
	// RequestID is the request id an exactly-once write carried (its
	// repetitions did not settle it in time); "" for another write.
	RequestID string
}

func (e *OutcomeUnknownError) Error() string {
	if e.RequestID != "" {
		return fmt.Sprintf("outcome unknown: %s (request id %s) was sent to %s and repeated until the deadline, and may or may not have been applied (%v); "+
			"repeat it with the same request id to apply it at most once",
			methodName(e.Method), e.RequestID, e.Address, e.Err)
	}
	return fmt.Sprintf("outcome unknown: %s was sent to %s and may or may not have been applied (%v); check before repeating it",
		methodName(e.Method), e.Address, e.Err)
}

// Unwrap gives ErrOutcomeUnknown and the last error.
func (e *OutcomeUnknownError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Err} }

func methodName(full string) string {
	if i := strings.LastIndexByte(full, '/'); i >= 0 && i+1 < len(full) {
		return full[i+1:]
	}
	if full == "" {
		return "the request"
	}
	return full
}

type requestIDKey struct{}

// WithRequestID returns ctx carrying id as the request id of the write Do
// makes with it (instead of one Do generates). Use it to repeat a write
// across calls of Do, processes or clients: every repetition with the same
// id and body has the effect of one, and answers with the original result.
// A coordinator accepts ids of 1 to 128 letters, digits, '.', '_', '-'.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// NewRequestID returns a fresh random request id.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// attempt is one try of a call on one connection. It records the RPC the
// call made, to tell reads from writes, and sends a write only on a
// connection that is up, so that a write that could not be sent is known
// not to have been applied.
type attempt struct {
	cc       *grpc.ClientConn
	wait     time.Duration // ConnectWait
	method   string
	unsent   bool   // a write found no connection and was not sent
	inFlight bool   // an RPC was sent
	id       string // the call's request id
	writes   int    // exactly-once writes sent so far in this attempt
}

// withID adds the request id of the attempt's next exactly-once write: the
// call's id for its first, "<id>.<n>" for its n+1st (a call should make one
// RPC, but one that makes more repeats each with an id of its own).
func (a *attempt) withID(ctx context.Context, method string) context.Context {
	if adminapi.SemanticsOf(method) != adminapi.ExactlyOnce {
		return ctx
	}
	id := a.id
	if a.writes > 0 {
		id = fmt.Sprintf("%s.%d", a.id, a.writes)
	}
	a.writes++
	return metadata.AppendToOutgoingContext(ctx, adminapi.RequestIDHeader, id)
}

func (a *attempt) send(ctx context.Context, method string) error {
	a.method = method
	if adminapi.SemanticsOf(method) != adminapi.RetrySafe && !ready(ctx, a.cc, a.wait) {
		a.unsent = true
		return status.Errorf(codes.Unavailable, "no connection to %s (not sent)", a.cc.Target())
	}
	a.inFlight = true
	return nil
}

func (a *attempt) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if err := a.send(ctx, method); err != nil {
		return err
	}
	return a.cc.Invoke(a.withID(ctx, method), method, args, reply, opts...)
}

func (a *attempt) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if err := a.send(ctx, method); err != nil {
		return nil, err
	}
	return a.cc.NewStream(a.withID(ctx, method), desc, method, opts...)
}

// ready waits, at most wait, until cc has a connection; it reports whether
// it has one. A connection in TRANSIENT_FAILURE is not waited for.
func ready(ctx context.Context, cc *grpc.ClientConn, wait time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		st := cc.GetState()
		switch st {
		case connectivity.Ready:
			return true
		case connectivity.TransientFailure, connectivity.Shutdown:
			return false
		case connectivity.Idle:
			cc.Connect()
		}
		if !cc.WaitForStateChange(ctx, st) {
			return false
		}
	}
}

// Do runs call against the leader: it starts at the last known leader (or
// the bootstrap addresses in turn), follows NOT_LEADER answers to the
// address they carry, and tries the next address on an unreachable one,
// until ctx ends (or Timeout passes, when ctx has no deadline): redirects
// and retries are bounded by time, not by a count.
//
// call must make one RPC. A read (adminapi.RetrySafe) is repeated after any
// UNAVAILABLE answer. An exactly-once write (adminapi.ExactlyOnce) carries one
// request id in all its attempts (ctx's, see WithRequestID, or a fresh
// one) and is repeated after an ambiguous failure too (a connection lost
// under it, an answer with outcome UNKNOWN other than INTERNAL): the
// coordinators apply it once and answer a repetition with the original
// result. Another write is repeated only when it is known not to have
// been applied: its coordinator could not be reached, answered NOT_LEADER,
// or answered with outcome NOT_APPLIED. A write that may have been applied
// and is not repeated (another write after an ambiguous failure, an
// INTERNAL answer, any write in flight when the deadline passes) ends with
// an *OutcomeUnknownError (ErrOutcomeUnknown).
//
// A TLS handshake failure that retrying cannot cure (an untrusted or
// misnamed certificate, a TLS alert from the coordinator refusing this
// client's certificate, a peer that does not speak TLS) ends the call at
// once with a *TLSError naming the coordinator; nothing was sent.
//
// Otherwise it returns call's last error converted with adminapi.FromStatus, so
// callers test it with errors.Is / errors.As; when ctx ends first, ctx's
// error wrapped with the last answer.
func (c *Client) Do(ctx context.Context, call func(ctx context.Context, cc grpc.ClientConnInterface) error) error {
	if _, ok := ctx.Deadline(); !ok && c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	id, _ := ctx.Value(requestIDKey{}).(string)
	if id == "" {
		id = NewRequestID()
	}
	var (
		lastErr     error  // the last answer's error
		lastAddr    string // who gave it
		unreachable string // the last coordinator a write found no connection to
		next        int
	)
	var ambiguous *OutcomeUnknownError // an exactly-once write that may have been applied
	timedOut := func() error {
		if ambiguous != nil {
			// Its repetitions did not settle it before the deadline.
			return ambiguous
		}
		if lastErr == nil && unreachable == "" {
			return deadline.Err(ctx)
		}
		return &DeadlineError{Err: deadline.Err(ctx), LastAnswer: adminapi.FromStatus(lastErr), LastAddress: lastAddr, Unreachable: unreachable}
	}
	for {
		if deadline.Err(ctx) != nil {
			return timedOut()
		}
		addr := c.Leader()
		if addr == "" {
			known := c.Coordinators()
			if next > 0 && next%len(known) == 0 && !retry.Sleep(ctx, c.RetryWait) {
				return timedOut()
			}
			addr = known[next%len(known)]
			next++
		}
		cc, err := c.conn(addr)
		if err != nil {
			return err
		}
		at := &attempt{cc: cc, wait: c.ConnectWait, id: id}
		err = call(ctx, at)
		write := adminapi.SemanticsOf(at.method) != adminapi.RetrySafe
		once := adminapi.SemanticsOf(at.method) == adminapi.ExactlyOnce
		if err == nil {
			c.setLeader(addr)
			return nil
		}
		if deadline.Err(ctx) != nil {
			if write && at.inFlight {
				ou := &OutcomeUnknownError{Address: addr, Method: at.method, Err: deadline.Err(ctx)}
				if once {
					ou.RequestID = id
				}
				return ou
			}
			return timedOut()
		}
		if at.unsent {
			if terr := c.tlsFails.get(addr); terr != nil {
				return &TLSError{Address: addr, Err: terr}
			}
			// Nothing was sent: try the next coordinator.
			unreachable = addr
			c.setLeader("")
			continue
		}
		lastErr, lastAddr = err, addr
		if leader, ok := adminapi.NotLeaderAddress(err); ok {
			c.setLeader(leader) // "" when unknown: fall back to bootstrap
			if leader == addr && !retry.Sleep(ctx, c.RetryWait) {
				return timedOut()
			}
			continue
		}
		d := adminapi.DetailOf(err)
		switch {
		case d != nil && d.Outcome == adminv1.Outcome_OUTCOME_NOT_APPLIED:
			// Refused without effect (the coordinator's backend closed
			// under it): try again, elsewhere if need be.
		case d != nil && d.Outcome == adminv1.Outcome_OUTCOME_UNKNOWN && once && status.Code(err) != codes.Internal:
			// Repeated with the same request id: applied at most once.
			ambiguous = &OutcomeUnknownError{Address: addr, Method: at.method, Err: adminapi.FromStatus(err), RequestID: id}
			if !retry.Sleep(ctx, c.RetryWait) {
				return ambiguous
			}
		case d != nil && d.Outcome == adminv1.Outcome_OUTCOME_UNKNOWN:
			if write {
				return &OutcomeUnknownError{Address: addr, Method: at.method, Err: adminapi.FromStatus(err)}
			}
			if status.Code(err) == codes.Internal {
				return adminapi.FromStatus(err)
			}
		case d == nil && !write && status.Code(err) == codes.Unavailable && c.tlsFails.get(addr) != nil:
			// A read failed at once on a connection whose TLS handshake
			// cannot succeed: retrying would not help.
			return &TLSError{Address: addr, Err: c.tlsFails.get(addr)}
		case d == nil && (status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded):
			// The transport failed under an RPC that was sent: a write
			// may have reached the coordinator.
			if write && !once {
				return &OutcomeUnknownError{Address: addr, Method: at.method, Err: adminapi.FromStatus(err)}
			}
			if once {
				ambiguous = &OutcomeUnknownError{Address: addr, Method: at.method, Err: adminapi.FromStatus(err), RequestID: id}
			}
			unreachable = addr
			if lastAddr == addr {
				lastErr, lastAddr = nil, ""
			}
		default:
			return adminapi.FromStatus(err)
		}
		c.setLeader("")
	}
}

// Admin runs call with an AdminService client against the leader (see Do).
func (c *Client) Admin(ctx context.Context, call func(ctx context.Context, a adminv1.AdminServiceClient) error) error {
	return c.Do(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		return call(ctx, adminv1.NewAdminServiceClient(cc))
	})
}

// Tablets runs call with a TabletServerService client against the leader.
func (c *Client) Tablets(ctx context.Context, call func(ctx context.Context, t adminv1.TabletServerServiceClient) error) error {
	return c.Do(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		return call(ctx, adminv1.NewTabletServerServiceClient(cc))
	})
}

// TabletsAt runs call with a TabletServerService client against the
// coordinator at addr (host:port) only: no redirect, no retry elsewhere.
// It is for the RPCs every coordinator serves (FetchMetadata,
// FetchMetadataSnapshot), which a tablet server spreads over the
// coordinators. Errors: call's error converted with adminapi.FromStatus (a
// follower that serves only the leader's RPCs answers core.ErrNotLeader).
func (c *Client) TabletsAt(ctx context.Context, addr string, call func(ctx context.Context, t adminv1.TabletServerServiceClient) error) error {
	cc, err := c.conn(adminapi.HostPort(addr))
	if err != nil {
		return err
	}
	if err := call(ctx, adminv1.NewTabletServerServiceClient(cc)); err != nil {
		return adminapi.FromStatus(err)
	}
	return nil
}

// GetLeader asks each coordinator the client knows (see Coordinators) in
// turn who leads, without redirects. Errors: the last coordinator's error
// when none answers.
func (c *Client) GetLeader(ctx context.Context) (*adminv1.GetLeaderResponse, error) {
	var lastErr error
	for _, addr := range c.Coordinators() {
		r, err := c.GetLeaderFrom(ctx, addr)
		if err == nil {
			return r, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// GetLeaderFrom asks the coordinator at addr (host:port) who leads and
// which coordinators it knows, without redirects. Errors: its answer,
// converted with adminapi.FromStatus.
func (c *Client) GetLeaderFrom(ctx context.Context, addr string) (*adminv1.GetLeaderResponse, error) {
	cc, err := c.conn(adminapi.HostPort(addr))
	if err != nil {
		return nil, err
	}
	r, err := adminv1.NewAdminServiceClient(cc).GetLeader(ctx, &adminv1.GetLeaderRequest{})
	if err != nil {
		return nil, adminapi.FromStatus(err)
	}
	return r, nil
}

// RaftStatusFrom asks the coordinator at addr (host:port) for its view of
// the Raft quorum (GetCoordinatorRaftStatus), without redirects: any member
// answers for itself. Errors: its answer, converted with adminapi.FromStatus.
func (c *Client) RaftStatusFrom(ctx context.Context, addr string) (*adminv1.GetCoordinatorRaftStatusResponse, error) {
	cc, err := c.conn(adminapi.HostPort(addr))
	if err != nil {
		return nil, err
	}
	r, err := adminv1.NewAdminServiceClient(cc).GetCoordinatorRaftStatus(ctx, &adminv1.GetCoordinatorRaftStatusRequest{})
	if err != nil {
		return nil, adminapi.FromStatus(err)
	}
	return r, nil
}

// Close stops the background refresh (Options.RefreshInterval) and closes
// every connection.
func (c *Client) Close() error {
	if c.stop != nil {
		c.stop()
		<-c.stopped
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, cc := range c.conns {
		errs = append(errs, cc.Close())
	}
	c.conns = map[string]*grpc.ClientConn{}
	return errors.Join(errs...)
}
