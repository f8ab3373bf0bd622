package adminclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/metaplane/metaplane/core"
	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// Client calls the coordinators' gRPC services, finding the leader among
// bootstrap addresses and following NOT_LEADER redirects. It is safe for
// concurrent use; Close it when done.
type Client struct {
	bootstrap []string
	// MaxRedirects bounds the redirects and retries of one call; default 10.
	MaxRedirects int
	// RetryWait is the pause before retrying when no leader is known;
	// default 200ms.
	RetryWait time.Duration

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	leader string // last known leader address
}

// NewClient returns a client for the coordinators at bootstrap (host:port
// addresses; listener prefixes like CLIENT:// are accepted). Errors:
// ErrInvalidArgument when bootstrap is empty.
func NewClient(bootstrap []string) (*Client, error) {
	var addrs []string
	for _, b := range bootstrap {
		for _, a := range strings.Split(b, ",") {
			if a = HostPort(strings.TrimSpace(a)); a != "" {
				addrs = append(addrs, a)
			}
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: no coordinator address given", core.ErrInvalidArgument)
	}
	return &Client{bootstrap: addrs, MaxRedirects: 10, RetryWait: 200 * time.Millisecond, conns: map[string]*grpc.ClientConn{}}, nil
}

func (c *Client) conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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

// Do runs call against the leader: it starts at the last known leader (or
// the bootstrap addresses in turn), follows NOT_LEADER answers to the
// address they carry, and tries the next address on an unreachable one.
// It returns call's last error converted with FromStatus, so callers test
// it with errors.Is / errors.As. Cancelling ctx ends the call.
func (c *Client) Do(ctx context.Context, call func(ctx context.Context, cc grpc.ClientConnInterface) error) error {
	var lastErr error
	next := 0
	for attempt := 0; attempt <= c.MaxRedirects+len(c.bootstrap); attempt++ {
		addr := c.Leader()
		if addr == "" {
			addr = c.bootstrap[next%len(c.bootstrap)]
			next++
		}
		cc, err := c.conn(addr)
		if err != nil {
			return err
		}
		err = call(ctx, cc)
		if err == nil {
			c.mu.Lock()
			c.leader = addr
			c.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lastErr = err
		if leader, ok := NotLeaderAddress(err); ok {
			c.mu.Lock()
			c.leader = leader // "" when unknown: fall back to bootstrap
			c.mu.Unlock()
			if leader == "" || leader == addr {
				if !sleep(ctx, c.RetryWait) {
					return ctx.Err()
				}
			}
			continue
		}
		if st, ok := status.FromError(err); ok && (st.Code() == codes.Unavailable || st.Code() == codes.DeadlineExceeded && DetailOf(err) == nil) {
			c.mu.Lock()
			c.leader = ""
			c.mu.Unlock()
			if next%len(c.bootstrap) == 0 && !sleep(ctx, c.RetryWait) {
				return ctx.Err()
			}
			continue
		}
		return FromStatus(err)
	}
	if _, ok := NotLeaderAddress(lastErr); ok {
		return fmt.Errorf("no coordinator leader found after %d attempts: %w", c.MaxRedirects, FromStatus(lastErr))
	}
	if st, ok := status.FromError(lastErr); ok && st.Code() == codes.Unavailable && DetailOf(lastErr) == nil {
		return &serverError{sentinel: core.ErrUnavailable, msg: fmt.Sprintf("no coordinator reachable at %s (is one running?): %s",
			strings.Join(c.bootstrap, ","), st.Message())}
	}
	return FromStatus(lastErr)
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

// GetLeader asks each bootstrap coordinator in turn who leads, without
// redirects. Errors: the last coordinator's error when none answers.
func (c *Client) GetLeader(ctx context.Context) (*adminv1.GetLeaderResponse, error) {
	var lastErr error
	for _, addr := range c.bootstrap {
		cc, err := c.conn(addr)
		if err != nil {
			return nil, err
		}
		r, err := adminv1.NewAdminServiceClient(cc).GetLeader(ctx, &adminv1.GetLeaderRequest{})
		if err == nil {
			return r, nil
		}
		lastErr = FromStatus(err)
	}
	return nil, lastErr
}

// Close closes every connection.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, cc := range c.conns {
		errs = append(errs, cc.Close())
	}
	c.conns = map[string]*grpc.ClientConn{}
	return errors.Join(errs...)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
