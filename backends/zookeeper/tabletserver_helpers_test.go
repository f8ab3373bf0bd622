package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/metaplane/metaplane/core"
)

// TabletServerPath returns the registration path of tablet server id,
// /tabletservers/ids/<id> (under the root).
func TabletServerPath(id int) string {
	return "/tabletservers/ids/" + strconv.Itoa(id)
}

// RegisterTabletServer registers tablet server id in b's session: the
// ephemeral node /tabletservers/ids/<id> holding data (the caller's
// TabletServerRegistration v4 JSON), creating missing parents.
//
// As the original does, a node left by an earlier session of the same
// server (a restart before the old session expired) is waited out: the
// create is retried until that node is gone, or ctx ends. A node already
// owned by b's current session counts as registered (a retry whose first
// answer was lost). It uses only the core API, so it works on any backend
// with ZooKeeper-style sessions, in process or across the plugin boundary.
//
// Errors: ErrInvalidArgument (negative id), ErrUnavailable, ErrClosed,
// context errors (still waiting for the old node).
func RegisterTabletServer(ctx context.Context, b core.MetadataBackend, id int, data []byte) error {
	if id < 0 {
		return fmt.Errorf("%w: tablet server id %d is negative", core.ErrInvalidArgument, id)
	}
	path := TabletServerPath(id)
	wait := 50 * time.Millisecond
	for {
		_, _, err := core.Create(ctx, b, path, data, core.CreateOptions{Mode: core.Ephemeral, MakeParents: true})
		if err == nil {
			return nil
		}
		if !errors.Is(err, core.ErrNodeExists) && !errors.Is(err, core.ErrUnavailable) {
			return fmt.Errorf("register tablet server %d: %w", id, err)
		}
		if errors.Is(err, core.ErrNodeExists) {
			st, ok, err := core.Exists(ctx, b, path)
			if err == nil && ok && st.EphemeralOwner != 0 && st.EphemeralOwner == b.Session().ID {
				return nil
			}
			if err == nil && ok && st.EphemeralOwner == 0 {
				return fmt.Errorf("register tablet server %d: %w: %s exists and is not ephemeral", id, core.ErrNodeExists, path)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("register tablet server %d: waiting for %s to go: %w", id, path, ctx.Err())
		case <-t.C:
		}
		if wait < time.Second {
			wait *= 2
		}
	}
}

// KeepTabletServerRegistered registers tablet server id (see
// RegisterTabletServer) and registers it again whenever b's session is
// replaced (after an expiry the ephemeral node is gone with the old
// session). registered, when not nil, is called after each attempt with
// its outcome. It returns when ctx ends (ctx's error) or b closes
// (ErrClosed); the registration then stays until the session ends.
func KeepTabletServerRegistered(ctx context.Context, b core.MetadataBackend, id int, data []byte, registered func(error)) error {
	events, err := b.SessionEvents(ctx)
	if err != nil {
		return err
	}
	report := func(err error) {
		if registered != nil {
			registered(err)
		}
	}
	var session int64
	register := func() {
		for ctx.Err() == nil {
			sid := b.Session().ID
			err := RegisterTabletServer(ctx, b, id, data)
			report(err)
			if err == nil {
				session = sid
				return
			}
			if errors.Is(err, core.ErrClosed) {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	register()
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return core.ErrClosed
			}
			if ev.State == core.SessionConnected && ev.SessionID != session {
				register()
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
