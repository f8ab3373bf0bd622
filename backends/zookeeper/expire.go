package zookeeper

import (
	"context"
	"fmt"
	"time"

	"github.com/metaplane/metaplane/core"
)

// ExpireSession expires the client's current session now, the standard
// ZooKeeper way: a second connection presents the session's id and
// password and closes the session, so the server deletes its ephemerals
// as a timeout would; the client's own connection is then dropped, and on
// reconnecting it learns that the session expired. It returns once
// SessionExpired and then SessionConnected (a new session) were delivered.
// For tests; operators never need it. Errors: ErrUnavailable, ErrClosed,
// context errors.
func (b *Backend) ExpireSession(ctx context.Context) error {
	if err := b.waitConnected(ctx); err != nil {
		return err
	}
	sid, passwd := b.wire.session()
	if sid == 0 || sid != b.Session().ID {
		return fmt.Errorf("%w: session changing, try again", core.ErrUnavailable)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := b.SessionEvents(sctx)
	if err != nil {
		return err
	}
	server := b.conn.Server()
	if err := closeSession(server, sid, passwd, 5*time.Second); err != nil {
		return fmt.Errorf("%w: expire session 0x%x on %s: %v", core.ErrUnavailable, sid, server, err)
	}
	b.wire.dropConn()
	expired := false
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return b.closedErr(ctx.Err())
			}
			if ev.State == core.SessionExpired && ev.SessionID == sid {
				expired = true
			}
			if expired && ev.State == core.SessionConnected && ev.SessionID != sid {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
