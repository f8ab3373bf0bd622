package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	plugin "github.com/hashicorp/go-plugin"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/retry"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// BinaryPrefix is the file name prefix of backend plugin binaries: the
// plugin of backend NAME is BinaryPrefix+NAME.
const BinaryPrefix = config.PluginBinaryPrefix

// The configuration keys the host reads for plugins (documented in
// docs/plugins.md).
const (
	KeyPluginDir    = "metadata.backend.plugin.dir"
	KeyPluginSHA256 = "metadata.backend.plugin.sha256"
)

// LaunchOptions says which plugin to start and how.
type LaunchOptions struct {
	// Path is the plugin binary. When empty, the binary is
	// Dir/metaplane-backend-<Name>.
	Path string
	// Name is the backend's name ("memory", "zookeeper", "raft", ...),
	// used when Path is empty.
	Name string
	// Dir is where plugins are found (metadata.backend.plugin.dir); empty
	// means the directory of the running executable.
	Dir string
	// SHA256, when set, is the expected hex SHA-256 of the binary
	// (metadata.backend.plugin.sha256). The binary is checked before every
	// start and refused on a mismatch.
	SHA256 string
	// Logger receives the host's plugin events and the plugin's own logs
	// (with a "plugin" attribute naming it). Nil means slog.Default().
	Logger *slog.Logger
	// Config is the flat configuration handed to the plugin's Start
	// (config.Config.PluginSettings()); nil means none (the plugin's defaults).
	Config map[string]string

	// MaxFailures within FailureWindow make the host give up restarting
	// the plugin (defaults 5 and 1 minute). A death and a failed restart
	// each count as one failure.
	MaxFailures   int
	FailureWindow time.Duration
	// RestartBackoff is the first delay before a restart, doubled after
	// each failure within FailureWindow up to MaxRestartBackoff (defaults
	// 100ms and 5s), each spread by ±50% (internal/retry).
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration
	// StartTimeout bounds one start of the plugin: process start,
	// handshake and the backend's Start (default 1 minute).
	StartTimeout time.Duration

	// noDeathSignal leaves the kernel's parent-death signal off, so tests
	// can check the plugin's own parent watch.
	noDeathSignal bool
	// noAutoMTLS turns go-plugin's automatic mutual TLS off; only the
	// plugin-boundary benchmark does, to measure what it costs.
	noAutoMTLS bool
}

// levelName is the plugin log level matching l: the lowest level l logs.
func levelName(l *slog.Logger) string {
	ctx := context.Background()
	switch {
	case l.Enabled(ctx, slog.LevelDebug):
		return "debug"
	case l.Enabled(ctx, slog.LevelInfo):
		return "info"
	case l.Enabled(ctx, slog.LevelWarn):
		return "warn"
	}
	return "error"
}

// ResolvePath returns the plugin binary LaunchOptions name: Path, or
// Dir/metaplane-backend-<Name> with Dir defaulting to the directory of the
// running executable. Errors wrap core.ErrInvalidArgument.
func (o LaunchOptions) ResolvePath() (string, error) {
	if o.Path != "" {
		return o.Path, nil
	}
	if o.Name == "" {
		return "", fmt.Errorf("%w: plugin launch: neither a path nor a backend name was given", core.ErrInvalidArgument)
	}
	if strings.ContainsAny(o.Name, `/\`) || o.Name == "." || o.Name == ".." {
		return "", fmt.Errorf("%w: plugin launch: backend name %q is not a plain name", core.ErrInvalidArgument, o.Name)
	}
	dir := o.Dir
	if dir == "" {
		var err error
		dir, err = DefaultDir()
		if err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, BinaryPrefix+o.Name), nil
}

// DefaultDir is the default plugin directory: the directory of the running
// executable (symbolic links resolved).
func DefaultDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("%w: locating the plugin directory (%s unset): %v", core.ErrInvalidArgument, KeyPluginDir, err)
	}
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	return filepath.Dir(exe), nil
}

// Plugin is a running backend plugin, as the host sees it: it opens
// clients, watches the process, restarts it when it dies and gives up
// after repeated failures. It is safe for concurrent use.
type Plugin struct {
	name   string
	path   string
	opts   LaunchOptions
	logger *slog.Logger
	desc   core.BackendDescriptor
	// launch starts a new incarnation of the plugin; nil for a plugin that
	// cannot be restarted (Connect).
	launch func(ctx context.Context) (*conn, error)

	mu       sync.Mutex
	compact  bool // the provider is a core.HistoryCompactor
	cur      *conn
	clients  map[*Client]struct{}
	closed   bool
	err      error
	done     chan struct{}
	restarts int
	failures []time.Time
}

// conn is one incarnation of the plugin: a process (or an in-process
// connection) and its gRPC client.
type conn struct {
	name string
	rpc  pb.BackendClient
	// ctx ends when the incarnation dies or the host closes it.
	ctx    context.Context
	cancel context.CancelFunc
	pc     *plugin.Client // nil in process
	pid    int

	txnOnce sync.Once
	txns    *txnMux // see txnMux
}

// Launch starts the plugin binary that opts names, checks its checksum
// when one is configured, describes and starts it with opts.Config, and
// watches it from then on (see Plugin). Errors: a checksum mismatch (naming
// metadata.backend.plugin.sha256 and both digests), a missing binary, a
// failed handshake, or the backend's Start error (which names the
// configuration key at fault); all wrap core.ErrInvalidArgument or
// core.ErrUnavailable. Cancelling ctx abandons the start.
func Launch(ctx context.Context, opts LaunchOptions) (*Plugin, error) {
	path, err := opts.ResolvePath()
	if err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxFailures <= 0 {
		opts.MaxFailures = 5
	}
	if opts.FailureWindow <= 0 {
		opts.FailureWindow = time.Minute
	}
	if opts.RestartBackoff <= 0 {
		opts.RestartBackoff = 100 * time.Millisecond
	}
	if opts.MaxRestartBackoff <= 0 {
		opts.MaxRestartBackoff = 5 * time.Second
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = time.Minute
	}
	name := filepath.Base(path)
	p := &Plugin{
		name:    name,
		path:    path,
		opts:    opts,
		logger:  opts.Logger.With("plugin", name),
		clients: map[*Client]struct{}{},
		done:    make(chan struct{}),
	}
	p.launch = p.startProcess
	cn, err := p.launch(ctx)
	if err != nil {
		return nil, err
	}
	p.cur = cn
	go p.monitor(cn)
	return p, nil
}

// Connect wraps an existing connection to a plugin's Backend service (for
// example go-plugin's in-process test connection) as a Plugin: it
// describes and starts the backend with cfg. There is no process to watch
// or restart: Close closes the clients but not the connection. Errors: as
// the backend's Start.
func Connect(ctx context.Context, rpc pb.BackendClient, cfg map[string]string, logger *slog.Logger) (*Plugin, error) {
	if logger == nil {
		logger = slog.Default()
	}
	cctx, cancel := context.WithCancel(context.Background())
	cn := &conn{name: "in-process", rpc: rpc, ctx: cctx, cancel: cancel}
	d, err := describeAndStart(ctx, cn, cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	desc := descriptorFromProto(d.Descriptor_)
	cn.name = desc.Name
	return &Plugin{
		name:    desc.Name,
		logger:  logger.With("plugin", desc.Name),
		desc:    desc,
		compact: d.CompactHistory,
		cur:     cn,
		clients: map[*Client]struct{}{},
		done:    make(chan struct{}),
	}, nil
}

func describeAndStart(ctx context.Context, cn *conn, cfg map[string]string) (*pb.DescribeResponse, error) {
	d, err := cn.rpc.Describe(ctx, &pb.DescribeRequest{})
	if err != nil {
		return nil, fmt.Errorf("describe plugin %s: %w", cn.name, callError(ctx, cn, err))
	}
	if _, err := cn.rpc.Start(ctx, &pb.StartRequest{Config: cfg}); err != nil {
		return nil, fmt.Errorf("start plugin %s: %w", cn.name, callError(ctx, cn, err))
	}
	return d, nil
}

// VerifyChecksum checks that the file at path has the hex SHA-256 want.
// A mismatch is an error naming metadata.backend.plugin.sha256, the file
// and both digests, wrapping core.ErrInvalidArgument.
func VerifyChecksum(path, want string) error {
	want = strings.ToLower(strings.TrimSpace(want))
	if b, err := hex.DecodeString(want); err != nil || len(b) != sha256.Size {
		return fmt.Errorf("%w: %s: %q is not a hex SHA-256 digest (64 hex digits)", core.ErrInvalidArgument, KeyPluginSHA256, want)
	}
	got, err := FileSHA256(path)
	if err != nil {
		return fmt.Errorf("%w: plugin %s: %v", core.ErrInvalidArgument, path, err)
	}
	if got != want {
		return fmt.Errorf("%w: plugin %s refused: its SHA-256 is %s but %s is %s", core.ErrInvalidArgument, path, got, KeyPluginSHA256, want)
	}
	return nil
}

// FileSHA256 returns the hex SHA-256 (lower case) of the file at path.
// Errors: the file's, from opening or reading it.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// startProcess starts one incarnation of the plugin process.
func (p *Plugin) startProcess(ctx context.Context) (*conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	st, err := os.Stat(p.path)
	if err != nil {
		return nil, fmt.Errorf("%w: plugin %s: %v (plugins are found in %s as %s<name>)", core.ErrInvalidArgument, p.path, err, KeyPluginDir, BinaryPrefix)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("%w: plugin %s is not an executable file", core.ErrInvalidArgument, p.path)
	}
	var secure *plugin.SecureConfig
	if p.opts.SHA256 != "" {
		if err := VerifyChecksum(p.path, p.opts.SHA256); err != nil {
			return nil, err
		}
		sum, _ := hex.DecodeString(strings.ToLower(strings.TrimSpace(p.opts.SHA256)))
		secure = &plugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}
	cmd := exec.Command(p.path)
	// go-plugin appends the host's environment after this.
	cmd.Env = []string{EnvLogLevel + "=" + levelName(p.opts.Logger)}
	if !p.opts.noDeathSignal {
		setParentDeathSignal(cmd)
	}
	hl := newHCLogger(p.opts.Logger, p.name)
	pc := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: PluginSets(nil),
		Cmd:              cmd,
		SecureConfig:     secure,
		// A fresh certificate for each start, on both sides, so that only
		// this host can speak to its plugin's socket (defence in depth
		// besides the socket's permissions; docs/security.md).
		AutoMTLS:         !p.opts.noAutoMTLS,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           hl,
		StartTimeout:     p.opts.StartTimeout,
		GRPCDialOptions:  grpcDialOptions(),
		SyncStdout:       &lineLogger{log: func(l string) { p.logger.Info(l, "stream", "stdout") }},
		SyncStderr:       &lineLogger{log: func(l string) { p.logger.Info(l, "stream", "stderr") }},
	})
	fail := func(err error) (*conn, error) {
		pc.Kill()
		return nil, err
	}
	type result struct {
		rpc pb.BackendClient
		err error
	}
	resc := make(chan result, 1)
	cctx, ccancel := context.WithCancel(context.Background())
	go func() {
		// The kernel sends the parent-death signal when the *thread* that
		// started the child exits, and Go ends a thread when a goroutine
		// locked to it returns. Start the plugin from a locked thread that
		// lives as long as the plugin, so no thread exit kills it early.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		res := func() result {
			cp, err := pc.Client()
			if err != nil {
				return result{err: err}
			}
			raw, err := cp.Dispense(PluginName)
			if err != nil {
				return result{err: err}
			}
			rpc, ok := raw.(pb.BackendClient)
			if !ok {
				return result{err: fmt.Errorf("dispensed %T, not a metaplane.v1 Backend client", raw)}
			}
			return result{rpc: rpc}
		}()
		resc <- res
		if res.err == nil {
			<-cctx.Done()
		}
	}()
	var res result
	select {
	case res = <-resc:
	case <-ctx.Done():
		ccancel()
		return fail(fmt.Errorf("%w: starting plugin %s: %v", core.ErrUnavailable, p.path, ctx.Err()))
	}
	if res.err != nil {
		ccancel()
		if errors.Is(res.err, plugin.ErrChecksumsDoNotMatch) {
			return fail(fmt.Errorf("%w: plugin %s refused: its checksum does not match %s", core.ErrInvalidArgument, p.path, KeyPluginSHA256))
		}
		return fail(fmt.Errorf("%w: starting plugin %s: %v", core.ErrUnavailable, p.path, res.err))
	}
	pid, _ := strconv.Atoi(pc.ID())
	cn := &conn{name: p.name, rpc: res.rpc, ctx: cctx, cancel: ccancel, pc: pc, pid: pid}
	d, err := describeAndStart(ctx, cn, p.opts.Config)
	if err != nil {
		ccancel()
		return fail(err)
	}
	desc := descriptorFromProto(d.Descriptor_)
	p.mu.Lock()
	p.desc = desc
	p.compact = d.CompactHistory
	p.mu.Unlock()
	p.logger.Info("plugin started", "path", p.path, "pid", pid, "backend", desc.Name)
	return cn, nil
}

// exitPoll is how often the host checks whether the plugin process is
// alive; a dead plugin is noticed within this much (plus the time the
// kernel takes to close its pipes).
const exitPoll = 50 * time.Millisecond

// monitor watches incarnation cn until it dies or is closed.
func (p *Plugin) monitor(cn *conn) {
	t := time.NewTicker(exitPoll)
	defer t.Stop()
	for {
		select {
		case <-cn.ctx.Done():
			return
		case <-t.C:
			if cn.pc.Exited() {
				p.died(cn)
				return
			}
		}
	}
}

// died handles the death of incarnation cn: fail the clients' sessions,
// then restart.
func (p *Plugin) died(cn *conn) {
	p.mu.Lock()
	if p.cur != cn || p.closed {
		p.mu.Unlock()
		cn.cancel()
		return
	}
	p.cur = nil
	clients := p.clientList()
	p.mu.Unlock()
	// Release the dead incarnation's connection and socket directory.
	go p.kill(cn)
	cause := fmt.Errorf("%w: plugin %s (pid %d) exited", core.ErrUnavailable, p.name, cn.pid)
	p.logger.Error("plugin process exited; restarting it", "pid", cn.pid)
	for _, c := range clients {
		c.mu.Lock()
		r := c.rem
		c.mu.Unlock()
		if r != nil && r.conn == cn {
			c.lose(r, cause)
		}
	}
	go p.restart(cause)
}

// restart starts a new incarnation with backoff, or gives up.
func (p *Plugin) restart(cause error) {
	last := cause
	for {
		now := time.Now()
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		p.failures = append(p.failures, now)
		kept := p.failures[:0]
		for _, f := range p.failures {
			if now.Sub(f) < p.opts.FailureWindow {
				kept = append(kept, f)
			}
		}
		p.failures = kept
		n := len(kept)
		p.mu.Unlock()
		if n >= p.opts.MaxFailures {
			p.giveUp(fmt.Errorf("%w: plugin %s failed %d times within %v; giving up (last failure: %v)", core.ErrUnavailable, p.name, n, p.opts.FailureWindow, last))
			return
		}
		// The delay doubles with every failure within the window (jittered).
		if !retry.Sleep(context.Background(), retry.Nth(p.opts.RestartBackoff, p.opts.MaxRestartBackoff, n), p.done) {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-p.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		cn, err := p.launch(ctx)
		cancel()
		if err != nil {
			p.logger.Error("plugin restart failed", "error", err)
			last = err
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			p.kill(cn)
			return
		}
		p.cur = cn
		p.restarts++
		clients := p.clientList()
		p.mu.Unlock()
		go p.monitor(cn)
		p.logger.Info("plugin restarted", "pid", cn.pid, "restarts", p.restarts)
		for _, c := range clients {
			go c.reconnect(cn)
		}
		return
	}
}

func (p *Plugin) giveUp(err error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.err = err
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	p.logger.Error("giving up on the plugin", "error", err)
}

func (p *Plugin) clientList() []*Client {
	out := make([]*Client, 0, len(p.clients))
	for c := range p.clients {
		out = append(out, c)
	}
	return out
}

func (p *Plugin) forget(c *Client) {
	p.mu.Lock()
	delete(p.clients, c)
	p.mu.Unlock()
}

// downError is the error of a call made while no incarnation is live.
func (p *Plugin) downError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	if p.closed {
		return fmt.Errorf("%w: plugin %s was closed", core.ErrClosed, p.name)
	}
	return fmt.Errorf("%w: plugin %s is restarting", core.ErrUnavailable, p.name)
}

// Descriptor returns the backend's descriptor, as the plugin reported it.
func (p *Plugin) Descriptor() core.BackendDescriptor {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.desc
}

// CanCompactHistory reports whether the plugin's provider serves
// CompactHistory (it is a core.HistoryCompactor).
func (p *Plugin) CanCompactHistory() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.compact
}

// CompactHistory drops the plugin's change history up to and including
// revision: a test hook (see core.HistoryCompactor). Errors: ErrInvalidArgument
// when the provider does not support it, ErrUnavailable, context errors.
func (p *Plugin) CompactHistory(ctx context.Context, revision int64) error {
	p.mu.Lock()
	cn := p.cur
	p.mu.Unlock()
	if cn == nil {
		return p.downError()
	}
	if _, err := cn.rpc.CompactHistory(ctx, &pb.CompactHistoryRequest{Revision: revision}); err != nil {
		return callError(ctx, cn, err)
	}
	return nil
}

// Path returns the plugin binary's path ("" for Connect).
func (p *Plugin) Path() string { return p.path }

// Pid returns the process id of the running plugin, 0 when it is down or
// in process.
func (p *Plugin) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return 0
	}
	return p.cur.pid
}

// Restarts returns how many times the plugin was restarted.
func (p *Plugin) Restarts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restarts
}

// Done is closed when the plugin is over: closed by Close, or given up
// after repeated failures (then Err says why).
func (p *Plugin) Done() <-chan struct{} { return p.done }

// Err returns why the host gave up on the plugin (an error wrapping
// core.ErrUnavailable that says how often it failed and the last
// failure), or nil while it runs or after Close.
func (p *Plugin) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// NewClient opens a client (a session) in the plugin. It returns a *Client
// wrapped in a layer per optional part the plugin offers: find the parts
// with core.Optional, the *Client with ClientOf. Errors: ErrUnavailable (the plugin is down or restarting),
// ErrClosed, the backend's own errors, context errors.
func (p *Plugin) NewClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	return p.newClient(ctx, opts, false)
}

// NewConformanceClient opens a client like NewClient whose host side
// answers nothing by itself, for the conformance suite (plugintest), so
// that what the suite checks is the plugin's backend and not this
// package: a call whose context has already ended is still sent to the
// plugin, which calls its backend with a context ended the same way (gRPC
// alone would refuse to send it), and after Close every call, Close
// included, still reaches the closed client in the plugin, whose backend
// answers it. (Streams opened with an ended context are the exception:
// gRPC ends them on the host.) The plugin keeps such a client's closed
// backend client until it stops, so open these only in tests.
func (p *Plugin) NewConformanceClient(ctx context.Context, opts core.ClientOptions) (core.MetadataBackend, error) {
	return p.newClient(ctx, opts, true)
}

func (p *Plugin) newClient(ctx context.Context, opts core.ClientOptions, passThrough bool) (core.MetadataBackend, error) {
	p.mu.Lock()
	cn := p.cur
	p.mu.Unlock()
	if cn == nil {
		return nil, p.downError()
	}
	r, resp, stream, err := openRemote(ctx, cn, opts, passThrough)
	if err != nil {
		return nil, err
	}
	caps, ifaces := capabilitiesFromProto(resp.Capabilities)
	c := &Client{
		p:           p,
		opts:        opts,
		caps:        caps,
		rem:         r,
		session:     sessionInfoFromProto(resp.Session),
		changed:     make(chan struct{}),
		passThrough: passThrough,
	}
	p.mu.Lock()
	if p.closed || p.cur != cn {
		p.mu.Unlock()
		_ = c.Close()
		return nil, p.downError()
	}
	p.clients[c] = struct{}{}
	p.mu.Unlock()
	c.start(r, stream)
	return expose(c, ifaces), nil
}

// Close closes every client and stops the plugin process (asking it to
// shut down, killing it after two seconds). Idempotent.
func (p *Plugin) Close() error {
	p.mu.Lock()
	clients := p.clientList()
	p.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
	}
	cn := p.cur
	p.cur = nil
	p.mu.Unlock()
	if cn != nil {
		p.kill(cn)
		if cn.pc != nil {
			p.logger.Info("plugin stopped", "pid", cn.pid)
		}
	}
	return nil
}

func (p *Plugin) kill(cn *conn) {
	cn.cancel()
	if cn.pc != nil {
		cn.pc.Kill()
	}
}
