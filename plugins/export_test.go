package plugins

import (
	"context"
	"time"

	"github.com/metaplane/metaplane/core"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// SetHostResignTimeout sets the bound of the host's waits in Resign for
// one test; the returned function restores it.
func SetHostResignTimeout(d time.Duration) (restore func()) {
	old := hostResignTimeout
	hostResignTimeout = d
	return func() { hostResignTimeout = old }
}

// WithoutAutoMTLS returns o with go-plugin's automatic mTLS turned off
// (the plugin-boundary benchmark's comparison).
func WithoutAutoMTLS(o LaunchOptions) LaunchOptions {
	o.noAutoMTLS = true
	return o
}

// PumpWatch is the server's coalescing watch pump (pumpWatch).
func PumpWatch(ctx context.Context, ch <-chan core.WatchResponse, parts bool, send func(*pb.WatchResponse) error) error {
	return pumpWatch(ctx, ch, parts, send)
}

// WatchMergeEvents and WatchMergeBytes are the bounds of one coalesced
// watch message.
const (
	WatchMergeEvents = watchMergeEvents
	WatchMergeBytes  = watchMergeBytes
)

// OnWatchMessage makes f see every watch message the plugin server sends
// (in-process servers: this process's); the returned function removes it.
func OnWatchMessage(f func(*pb.WatchResponse)) (restore func()) {
	watchMessageHook.Store(&f)
	return func() { watchMessageHook.Store(nil) }
}

// SetTxnStream turns the host's use of TxnStream on or off (off: unary
// Txn calls only); the returned function restores it.
func SetTxnStream(on bool) (restore func()) {
	old := txnStreamHostOff.Load()
	txnStreamHostOff.Store(!on)
	return func() { txnStreamHostOff.Store(old) }
}

// SetPluginTxnStreamUnimplemented makes this process's plugin servers
// answer TxnStream Unimplemented, as a plugin built before it does.
func SetPluginTxnStreamUnimplemented(on bool) (restore func()) {
	old := txnStreamOff.Load()
	txnStreamOff.Store(on)
	return func() { txnStreamOff.Store(old) }
}

// TxnStreamCounts returns the messages and calls the host has sent on
// the TxnStream of b's current connection (b from Plugin.NewClient).
func TxnStreamCounts(b core.MetadataBackend) (messages, calls int64) {
	c, ok := ClientOf(b)
	if !ok {
		return 0, 0
	}
	r, err := c.current()
	if err != nil {
		return 0, 0
	}
	m := r.conn.txnMux()
	return m.sent.Load(), m.calls.Load()
}

// ClientPid is the pid of the plugin process b's calls go to (0 in
// process).
func ClientPid(b core.MetadataBackend) int {
	c, ok := ClientOf(b)
	if !ok {
		return 0
	}
	return c.p.Pid()
}

// JoinResetPages joins a Reset's pages for a host that predates them
// (joinResetPages).
var JoinResetPages = joinResetPages
