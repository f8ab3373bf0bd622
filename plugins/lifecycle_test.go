package plugins

import (
	"bufio"
	"bytes"
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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/testutil"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func memoryPlugin(t *testing.T) string {
	t.Helper()
	return testutil.Binary(t, "metaplane-backend-memory")
}

func launch(t *testing.T, opts LaunchOptions) *Plugin {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = discardLogger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Launch(ctx, opts)
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func newClient(t *testing.T, p *Plugin) core.MetadataBackend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := p.NewClient(ctx, core.ClientOptions{Name: t.Name()})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// TestPluginKilled: SIGKILL the plugin process. In-flight and new calls
// fail with ErrUnavailable, the leadership is lost, the watch ends with
// ErrUnavailable, the session is reported expired; the plugin is restarted
// and the client works again with a new session.
// noticeBound is how soon after a plugin dies the host must fail in-flight
// calls and report leadership lost (issue 3: "within a second").
const noticeBound = time.Second

func TestPluginKilled(t *testing.T) {
	p := launch(t, LaunchOptions{Path: memoryPlugin(t), RestartBackoff: 50 * time.Millisecond})
	c := newClient(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, _, err := core.Create(ctx, c, "/eph", []byte("x"), core.CreateOptions{Mode: core.Ephemeral}); err != nil {
		t.Fatalf("create: %v", err)
	}
	l, err := c.Campaign(ctx, core.Candidate{ID: "c1", Address: "CLIENT://127.0.0.1:1"})
	if err != nil {
		t.Fatalf("campaign: %v", err)
	}
	events, err := c.SessionEvents(ctx)
	if err != nil {
		t.Fatalf("session events: %v", err)
	}
	watch, err := c.Watch(ctx, "/", 0)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	leaders, err := c.ObserveLeader(ctx)
	if err != nil {
		t.Fatalf("observe leader: %v", err)
	}
	oldSession := c.Session().ID
	oldPid := p.Pid()
	if oldPid <= 0 {
		t.Fatalf("pid %d", oldPid)
	}

	// An in-flight call: the plugin holds it for a long time.
	fi, ok := core.Optional[core.FaultInjector](c)
	if !ok {
		t.Fatal("the memory plugin offers no FaultInjector")
	}
	fi.SetLatency(time.Minute)
	inflight := make(chan error, 1)
	go func() {
		_, err := core.Get(ctx, c, "/eph")
		inflight <- err
	}()
	// Give the call time to reach the plugin; even if it has not, it fails
	// the same way.
	time.Sleep(100 * time.Millisecond)

	killed := time.Now()
	if err := syscall.Kill(oldPid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill: %v", err)
	}
	select {
	case err := <-inflight:
		if !errors.Is(err, core.ErrUnavailable) {
			t.Errorf("in-flight call: %v, want ErrUnavailable", err)
		}
	case <-time.After(noticeBound):
		t.Fatalf("the in-flight call did not fail within %v of the kill", noticeBound)
	}
	select {
	case <-l.Lost():
		t.Logf("leadership lost %v after the kill", time.Since(killed))
	case <-time.After(noticeBound - time.Since(killed)):
		t.Fatalf("Lost not closed within %v of the kill", noticeBound)
	}
	if err := l.Resign(ctx); err != nil {
		t.Errorf("resign of a lost leadership: %v, want nil", err)
	}
	// The watch ends with ErrUnavailable.
	var last core.WatchResponse
	for r := range watch {
		last = r
	}
	if !errors.Is(last.Err, core.ErrUnavailable) {
		t.Errorf("last watch response %+v, want Err wrapping ErrUnavailable", last)
	}
	// The session: expired, then connected with a new id once restarted.
	waitEvent(t, events, core.SessionExpired, oldSession)
	// (A restarted memory plugin is a new store that numbers its sessions
	// from the start again, so the new id may equal the old one.)
	ev := waitEvent(t, events, core.SessionConnected, 0)
	if s := c.Session(); s.ID != ev.SessionID || s.State != core.SessionConnected {
		t.Errorf("Session() = %+v after the reconnect event %+v", s, ev)
	}
	if p.Restarts() != 1 {
		t.Errorf("restarts %d, want 1", p.Restarts())
	}
	if pid := p.Pid(); pid == oldPid || pid == 0 {
		t.Errorf("pid after restart %d (before %d)", pid, oldPid)
	}
	// Calls work again, on a fresh store.
	if _, err := core.Get(ctx, c, "/eph"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("get after restart: %v, want ErrNotFound", err)
	}
	if _, _, err := core.Create(ctx, c, "/again", nil, core.CreateOptions{}); err != nil {
		t.Errorf("create after restart: %v", err)
	}
	l2, err := c.Campaign(ctx, core.Candidate{ID: "c1", Address: "CLIENT://127.0.0.1:1"})
	if err != nil {
		t.Fatalf("campaign after restart: %v", err)
	}
	// The leader observation resumed on the new process.
	deadline := time.After(10 * time.Second)
	for {
		select {
		case li, ok := <-leaders:
			if !ok {
				t.Fatal("leader observation closed by the restart")
			}
			if li.ID == "c1" && li.Epoch == l2.Epoch() {
				return
			}
		case <-deadline:
			t.Fatal("the leader observation did not report the new leadership")
		}
	}
}

func waitEvent(t *testing.T, ch <-chan core.SessionEvent, state core.SessionState, id int64) core.SessionEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("session events closed while waiting for %v", state)
			}
			if ev.State == state && (id == 0 || ev.SessionID == id) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %v session event (session %d) within 10s", state, id)
		}
	}
}

// TestPluginGivesUp: a plugin that keeps dying is given up after
// MaxFailures within the window; calls then fail with the give-up error.
func TestPluginGivesUp(t *testing.T) {
	p := launch(t, LaunchOptions{Path: memoryPlugin(t), RestartBackoff: 10 * time.Millisecond, MaxFailures: 3, FailureWindow: time.Minute})
	c := newClient(t, p)
	killedPids := map[int]bool{}
	for i := 0; i < 10; i++ {
		var pid int
		testutil.WaitFor(t, 20*time.Second, "a running plugin or the give-up", func() bool {
			pid = p.Pid()
			select {
			case <-p.Done():
				return true
			default:
			}
			return pid != 0 && !killedPids[pid]
		})
		select {
		case <-p.Done():
			i = 10
			continue
		default:
		}
		killedPids[pid] = true
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the host did not give up")
	}
	if len(killedPids) != 3 {
		t.Errorf("killed %d processes before the give-up, want 3", len(killedPids))
	}
	err := p.Err()
	if !errors.Is(err, core.ErrUnavailable) || !strings.Contains(err.Error(), "giving up") {
		t.Fatalf("Err() = %v, want a give-up error wrapping ErrUnavailable", err)
	}
	_, gerr := core.Get(context.Background(), c, "/")
	if !errors.Is(gerr, core.ErrUnavailable) || !strings.Contains(gerr.Error(), "giving up") {
		t.Errorf("call after the give-up: %v", gerr)
	}
	if _, err := p.NewClient(context.Background(), core.ClientOptions{}); !errors.Is(err, core.ErrUnavailable) {
		t.Errorf("NewClient after the give-up: %v", err)
	}
}

// TestHostKilled: SIGKILL a host process; its plugin is gone within 2s. Run
// with the kernel's parent-death signal and with only the plugin's own
// parent watch.
func TestHostKilled(t *testing.T) {
	bin := memoryPlugin(t)
	for _, mode := range []string{"pdeathsig", "parent-watch"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envHostRole+"=1", envHostPlugin+"="+bin)
			if mode == "parent-watch" {
				cmd.Env = append(cmd.Env, envHostNoDeathSig+"=1")
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			lines := make(chan string, 1)
			go func() {
				sc := bufio.NewScanner(out)
				if sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			var pid int
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("the host printed no pid; stderr: %s", stderr.String())
				}
				if _, err := fmt.Sscanf(line, "pid %d", &pid); err != nil || pid <= 0 {
					t.Fatalf("host said %q", line)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("the host did not start its plugin; stderr: %s", stderr.String())
			}
			if !alive(pid) {
				t.Fatalf("plugin %d not running before the kill", pid)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			killed := time.Now()
			testutil.WaitFor(t, 2*time.Second, fmt.Sprintf("plugin %d to exit after its host was killed", pid), func() bool {
				return !alive(pid)
			})
			t.Logf("plugin gone %v after the host was killed", time.Since(killed))
		})
	}
}

// TestChecksum: a matching SHA-256 launches; a mismatch is refused naming
// the key and both digests; a malformed digest is refused.
func TestChecksum(t *testing.T) {
	bin := memoryPlugin(t)
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	good := hex.EncodeToString(sum[:])

	p := launch(t, LaunchOptions{Path: bin, SHA256: strings.ToUpper(good)})
	if p.Descriptor().Name != "memory" {
		t.Errorf("descriptor %+v", p.Descriptor())
	}

	bad := strings.Repeat("ab", 32)
	_, err = Launch(context.Background(), LaunchOptions{Path: bin, SHA256: bad, Logger: discardLogger()})
	if err == nil {
		t.Fatal("a checksum mismatch was accepted")
	}
	for _, want := range []string{KeyPluginSHA256, good, bad, bin} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("error %v does not wrap ErrInvalidArgument", err)
	}

	_, err = Launch(context.Background(), LaunchOptions{Path: bin, SHA256: "xyz", Logger: discardLogger()})
	if err == nil || !strings.Contains(err.Error(), KeyPluginSHA256) {
		t.Errorf("malformed digest: %v", err)
	}
}

// TestLaunchByName finds metaplane-backend-<name> in Dir, and names the
// directory key when it is missing.
func TestLaunchByName(t *testing.T) {
	bin := memoryPlugin(t)
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, "metaplane-backend-memory")); err != nil {
		t.Fatal(err)
	}
	p := launch(t, LaunchOptions{Name: "memory", Dir: dir})
	if got := p.Path(); got != filepath.Join(dir, "metaplane-backend-memory") {
		t.Errorf("path %q", got)
	}
	_, err := Launch(context.Background(), LaunchOptions{Name: "etcd", Dir: dir, Logger: discardLogger()})
	if err == nil || !strings.Contains(err.Error(), "metaplane-backend-etcd") || !strings.Contains(err.Error(), KeyPluginDir) {
		t.Errorf("missing plugin: %v", err)
	}
	if _, err := Launch(context.Background(), LaunchOptions{Name: "../x", Logger: discardLogger()}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("name with a slash: %v", err)
	}
}

// TestDescribe runs the plugin in describe mode, without a handshake.
func TestDescribe(t *testing.T) {
	bin := memoryPlugin(t)
	d, err := Describe(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "memory" || d.SelectorKey != "" || d.Description == "" {
		t.Errorf("descriptor %+v", d)
	}
	// Something that is not a plugin.
	if _, err := Describe(context.Background(), "/bin/true"); err == nil || !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("describe /bin/true: %v, want an error", err)
	}
	// Run by hand without --describe: a clear message and exit 1.
	out, err := exec.Command(bin).CombinedOutput()
	var xe *exec.ExitError
	if !errors.As(err, &xe) || xe.ExitCode() != 1 || !strings.Contains(string(out), "--describe") {
		t.Errorf("plain run: %v, %q", err, out)
	}
}

// recordHandler keeps every record it handles.
type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

func (h *recordHandler) find(msg string) (slog.Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Message == msg {
			return r, true
		}
	}
	return slog.Record{}, false
}

// TestPluginLogsReachHost: the plugin's own log lines arrive in the host's
// logger, with the plugin's name once and the time the plugin logged at as
// the record's time (no second time attribute); closing the plugin logs
// that it stopped.
func TestPluginLogsReachHost(t *testing.T) {
	h := &recordHandler{}
	p := launch(t, LaunchOptions{Path: memoryPlugin(t), Logger: slog.New(h)})
	var rec slog.Record
	testutil.WaitFor(t, 10*time.Second, "the plugin's 'serving' log line in the host's log", func() bool {
		var ok bool
		rec, ok = h.find("backend plugin serving")
		return ok
	})
	attrs := map[string]string{}
	count := map[string]int{}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		count[a.Key]++
		return true
	})
	if count["plugin"] != 1 || count["timestamp"] != 0 {
		t.Errorf("attributes %v: want plugin once and no timestamp", attrs)
	}
	if d := time.Since(rec.Time); d < 0 || d > time.Minute || rec.Time.Nanosecond()%int(time.Millisecond) != 0 {
		t.Errorf("record time %v: want the plugin's (millisecond precision, in the last minute)", rec.Time)
	}
	if attrs["plugin"] != "metaplane-backend-memory" {
		t.Errorf("plugin attribute %q, want metaplane-backend-memory (attrs %v)", attrs["plugin"], attrs)
	}
	if attrs["backend"] != "memory" {
		t.Errorf("backend attribute %q (attrs %v)", attrs["backend"], attrs)
	}
	if rec.Level != slog.LevelInfo {
		t.Errorf("level %v, want INFO", rec.Level)
	}
	p.Close()
	for _, msg := range []string{"plugin process exited", "plugin stopped"} {
		r, ok := h.find(msg)
		if !ok {
			t.Errorf("no %q record after Close", msg)
			continue
		}
		n := 0
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "plugin" {
				n++
			}
			return true
		})
		if n > 1 {
			t.Errorf("%q names the plugin %d times", msg, n)
		}
	}
}

// TestDiscoverAndSelect: plugins in a directory are described without
// being started; a third-party plugin's selector key then selects it.
func TestDiscoverAndSelect(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(memoryPlugin(t), filepath.Join(dir, "metaplane-backend-memory")); err != nil {
		t.Fatal(err)
	}
	script := func(name, body string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	script("metaplane-backend-etcd", `echo '{"name":"etcd","selector_key":"etcd.endpoints","protocol_versions":[1]}'`, 0o755)
	script("metaplane-backend-misnamed", `echo '{"name":"other"}'`, 0o755)
	script("metaplane-backend-notexec", `echo '{"name":"notexec"}'`, 0o644)
	script("unrelated", `exit 1`, 0o755)

	found, err := Discover(context.Background(), dir)
	if err == nil || !strings.Contains(err.Error(), "metaplane-backend-misnamed") || !strings.Contains(err.Error(), `"other"`) {
		t.Errorf("error %v, want one naming the misnamed plugin", err)
	}
	var names []string
	for _, f := range found {
		names = append(names, f.Descriptor.Name)
	}
	if fmt.Sprint(names) != "[etcd memory]" {
		t.Fatalf("found %v, want [etcd memory]", names)
	}
	extra := ThirdParty(found)
	if len(extra) != 1 || extra[0].SelectorKey != "etcd.endpoints" {
		t.Fatalf("third-party descriptors %+v", extra)
	}
	cfg, err := config.Load(config.LoadOptions{ExtraBackends: extra, Overrides: []string{"etcd.endpoints=127.0.0.1:2379"}})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if cfg.Selected.Backend != "etcd" {
		t.Errorf("selected %+v, want etcd", cfg.Selected)
	}
	if cfg.Flatten()["etcd.endpoints"] != "127.0.0.1:2379" {
		t.Errorf("the plugin's key does not reach its configuration: %v", cfg.Flatten())
	}
	// Both a third-party selector key and a built-in one: refused.
	_, err = config.Load(config.LoadOptions{ExtraBackends: extra, Overrides: []string{"etcd.endpoints=127.0.0.1:2379", "zookeeper.address=127.0.0.1:2181"}})
	if err == nil || !strings.Contains(err.Error(), "etcd.endpoints") || !strings.Contains(err.Error(), "zookeeper.address") {
		t.Errorf("two selector keys: %v, want an error naming both", err)
	}
}

// TestRestartChecksChecksumAgain: a binary replaced after the start is
// refused at the restart (the checksum is checked before every start), and
// the failed restarts end in the give-up, whose error names the cause.
func TestRestartChecksChecksumAgain(t *testing.T) {
	b, err := os.ReadFile(memoryPlugin(t))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "metaplane-backend-memory")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	p := launch(t, LaunchOptions{Path: path, SHA256: hex.EncodeToString(sum[:]), RestartBackoff: 10 * time.Millisecond, MaxFailures: 3})
	// Replace the binary (a new file, as an upgrade would), then kill the
	// plugin.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the host did not give up on a binary that no longer matches its checksum")
	}
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), KeyPluginSHA256) || !strings.Contains(err.Error(), "giving up") {
		t.Errorf("Err() = %v, want the give-up naming %s", err, KeyPluginSHA256)
	}
	if p.Restarts() != 0 {
		t.Errorf("%d restarts of a refused binary", p.Restarts())
	}
}

// TestCloseStopsPlugin: closing the host's handle stops the plugin process
// (gracefully: it exits by itself) and fails later calls with ErrClosed.
func TestCloseStopsPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Launch(ctx, LaunchOptions{Path: memoryPlugin(t), Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.NewClient(ctx, core.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.Pid()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the plugin process to exit after Close", func() bool { return !alive(pid) })
	if _, err := core.Get(ctx, c, "/"); !errors.Is(err, core.ErrClosed) {
		t.Errorf("call after Close: %v, want ErrClosed", err)
	}
	if _, err := p.NewClient(ctx, core.ClientOptions{}); !errors.Is(err, core.ErrClosed) {
		t.Errorf("NewClient after Close: %v, want ErrClosed", err)
	}
	select {
	case <-p.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if p.Err() != nil {
		t.Errorf("Err() = %v after Close, want nil", p.Err())
	}
}

// Discover finds every backend plugin in dir (empty: DefaultDir), the
// built-in ones too, and describes each one: DiscoverThirdParty without
// its skip of the shipped plugins and its filter. Errors: as
// DiscoverThirdParty.
func Discover(ctx context.Context, dir string) ([]Found, error) {
	return scan(ctx, dir, nil)
}
