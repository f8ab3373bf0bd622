package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/metaplane/metaplane/core"
)

// EnvLogLevel is the environment variable that sets a plugin process's log
// level ("debug", "info", "warn", "error"; default info). The host sets it
// from its own logger.
const EnvLogLevel = "METAPLANE_PLUGIN_LOG_LEVEL"

// parentPoll is how often a plugin checks that its host is still alive.
const parentPoll = 100 * time.Millisecond

// shutdownTimeout bounds the provider's Close when the plugin stops.
const shutdownTimeout = time.Second

// Serve runs a backend plugin process serving p, and exits the process
// when the host stops it. A plugin's main calls it and nothing else:
//
//	func main() { plugins.Serve(memory.NewProvider()) }
//
// Run by hand with the single argument "describe" or "--describe", it
// prints p's descriptor as JSON (see DescriptorJSON) and exits 0 without
// the plugin handshake. Otherwise it must be started by metaplane (the
// handshake's magic cookie is in its environment): it logs to its stderr
// in the format the host re-logs under the plugin's name, serves the
// metaplane.v1 Backend service, and exits when the host asks it to, or on
// its own as soon as its parent process is gone (so it never outlives a
// host killed with SIGKILL). On the way out it closes every client and the
// provider (bounded to one second).
func Serve(p core.Provider) {
	os.Exit(serve(p, os.Args, os.Stdout, os.Stderr))
}

// DescriptorJSON is the JSON a plugin prints in describe mode.
type DescriptorJSON struct {
	Name        string `json:"name"`
	SelectorKey string `json:"selector_key,omitempty"`
	Description string `json:"description,omitempty"`
	Deprecated  string `json:"deprecated,omitempty"`
	// ProtocolVersions are the wire protocol versions the plugin speaks.
	ProtocolVersions []int `json:"protocol_versions"`
}

func serve(p core.Provider, argv []string, stdout, stderr io.Writer) int {
	prog := "metaplane-backend"
	if len(argv) > 0 {
		prog = filepath.Base(argv[0])
	}
	args := argv[1:]
	if len(args) == 1 && (args[0] == "describe" || args[0] == "--describe") {
		d := p.Descriptor()
		out, err := json.MarshalIndent(DescriptorJSON{
			Name: d.Name, SelectorKey: d.SelectorKey, Description: d.Description, Deprecated: d.Deprecated,
			ProtocolVersions: []int{ProtocolVersion},
		}, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prog, err)
			return 1
		}
		fmt.Fprintln(stdout, string(out))
		return 0
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "usage: %s [--describe]\n", prog)
		return 2
	}
	if os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue {
		fmt.Fprintf(stderr, "%s is a metaplane backend plugin: metaplane starts it (see docs/plugins.md).\n"+
			"Run `%s --describe` to see which backend it is, or\n"+
			"`metaplane conformance --plugin %s` to test it.\n", prog, prog, prog)
		return 1
	}

	level := new(slog.LevelVar)
	if s := os.Getenv(EnvLogLevel); s != "" {
		_ = level.UnmarshalText([]byte(s))
	}
	logger := slog.New(pluginLogHandler(stderr, level))
	slog.SetDefault(logger)

	gp := &GRPCPlugin{Provider: p}
	stop := func() {
		if gp.srv != nil {
			gp.srv.closeAll()
		}
		done := make(chan struct{})
		go func() {
			_ = p.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(shutdownTimeout):
			logger.Warn("backend did not close in time", "timeout", shutdownTimeout)
		}
	}
	watchParent(func() {
		logger.Error("the host process is gone; exiting")
		stop()
		os.Exit(1)
	})
	// The host owns the plugin's life: a terminal's Ctrl-C (go-plugin eats
	// SIGINT) or a supervisor's SIGTERM to the process group must reach
	// the host only, which then resigns and stops the plugin in order.
	// The plugin still dies with its host (parent-death signal, parent
	// watch) and when the host kills it.
	signal.Ignore(syscall.SIGTERM, syscall.SIGHUP)
	logger.Info("backend plugin serving", "backend", p.Descriptor().Name, "pid", os.Getpid(), "protocol", ProtocolVersion)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{ProtocolVersion: {PluginName: gp}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, grpcServerOptions()...)...)
		},
		Logger: pluginHCLogger(stderr),
	})
	// The host asked the plugin to stop.
	stop()
	return 0
}

// watchParent calls gone (once) when the process's parent changes, that is
// when the host died and the process was re-parented.
func watchParent(gone func()) {
	ppid := os.Getppid()
	if ppid <= 1 {
		return // started by init: there is no host to watch
	}
	go func() {
		t := time.NewTicker(parentPoll)
		defer t.Stop()
		for range t.C {
			if os.Getppid() != ppid {
				gone()
				return
			}
		}
	}()
}

// describeTimeout bounds Describe when ctx has no deadline.
const describeTimeout = 10 * time.Second

// Describe runs the plugin binary at path in describe mode and returns its
// descriptor, without the plugin handshake and without starting the
// backend. The host uses it to learn a third-party backend's selector key.
// Errors: the binary cannot be run, exits non-zero, or prints something
// that is not a descriptor with a name; they wrap core.ErrInvalidArgument.
// Cancelling ctx kills the process.
func Describe(ctx context.Context, path string) (core.BackendDescriptor, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, describeTimeout)
		defer cancel()
	}
	out, err := exec.CommandContext(ctx, path, "--describe").Output()
	if err != nil {
		msg := err.Error()
		var xe *exec.ExitError
		if errors.As(err, &xe) && len(xe.Stderr) > 0 {
			msg = fmt.Sprintf("%v: %s", err, firstLine(xe.Stderr))
		}
		return core.BackendDescriptor{}, fmt.Errorf("%w: describe plugin %s: %s", core.ErrInvalidArgument, path, msg)
	}
	var d DescriptorJSON
	if err := json.Unmarshal(out, &d); err != nil {
		return core.BackendDescriptor{}, fmt.Errorf("%w: describe plugin %s: its --describe output is not a descriptor: %v", core.ErrInvalidArgument, path, err)
	}
	if d.Name == "" {
		return core.BackendDescriptor{}, fmt.Errorf("%w: describe plugin %s: the descriptor has no name", core.ErrInvalidArgument, path)
	}
	return core.BackendDescriptor{Name: d.Name, SelectorKey: d.SelectorKey, Description: d.Description, Deprecated: d.Deprecated}, nil
}

func firstLine(b []byte) string {
	for i, c := range b {
		if c == '\n' {
			return string(b[:i])
		}
	}
	return string(b)
}
