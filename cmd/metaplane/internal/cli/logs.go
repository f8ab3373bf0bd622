package cli

import (
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"

	"github.com/metaplane/metaplane/config"
)

// NewLogger returns a process's logger on w, by log.level and log.format:
// text (logfmt) or JSON lines, each with the attribute process=name.
func NewLogger(w io.Writer, name string, lc config.LogConfig) *slog.Logger {
	level := slog.LevelInfo
	switch strings.ToLower(lc.Level) {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if isJSONLogs(lc) {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(h).With("process", name)
}

// isJSONLogs reports whether log.format is json.
func isJSONLogs(lc config.LogConfig) bool { return strings.EqualFold(lc.Format, "json") }

// daemonFlags are the flags of the daemons (coordinator, tablet-server)
// about their output: --log-level and --log-format (overriding log.level
// and log.format from every source) and --quiet (no banner).
type daemonFlags struct {
	level, format string
	quiet         bool
}

func addDaemonFlags(fs *pflag.FlagSet) *daemonFlags {
	d := &daemonFlags{}
	fs.StringVar(&d.level, "log-level", "", "the lowest level logged, `LEVEL` "+strings.Join(config.LogLevels, ", ")+" (overrides log.level; default info)")
	fs.StringVar(&d.format, "log-format", "", "the log lines on stderr, `FORMAT` text or json (overrides log.format; default text)")
	fs.BoolVar(&d.quiet, "quiet", false, "print no start-up banner (the logs stay)")
	return d
}

// apply adds the flags' settings to opts as the last overrides, so that
// they win over the file, the environment and -D.
func (d *daemonFlags) apply(opts config.LoadOptions) config.LoadOptions {
	if d.level != "" {
		opts.Overrides = append(opts.Overrides, "log.level="+d.level)
	}
	if d.format != "" {
		opts.Overrides = append(opts.Overrides, "log.format="+d.format)
	}
	return opts
}

// ToolFlags are the flags of the verbs that start a backend themselves
// and report their progress on stderr (migrate, zk-to-raft-*, the offline
// raft verbs): --log-level, which overrides log.level for the verb's own
// records and its plugin's (a plugin's INFO records among the progress:
// `--log-level warn` drops them), and --quiet, which drops the progress
// lines and every record below WARN (unless --log-level says otherwise).
// The result on stdout stays.
type ToolFlags struct {
	level string
	quiet bool
}

// AddToolFlags registers --log-level and, with quiet, --quiet on fs
// (migrate live has a --quiet of its own, a number of nodes).
func AddToolFlags(fs *pflag.FlagSet, quiet bool) *ToolFlags {
	t := &ToolFlags{}
	if !quiet {
		fs.StringVar(&t.level, "log-level", "", "the lowest level logged on stderr, `LEVEL` "+strings.Join(config.LogLevels, ", ")+" (overrides log.level; default info; warn drops the plugin's INFO records)")
		return t
	}
	fs.StringVar(&t.level, "log-level", "", "the lowest level logged on stderr, `LEVEL` "+strings.Join(config.LogLevels, ", ")+" (overrides log.level; default info, warn with --quiet)")
	fs.BoolVar(&t.quiet, "quiet", false, "print no progress on stderr, and log warnings and errors only")
	return t
}

// overrides are the configuration overrides the flags make, to add last
// (they win over the file, the environment and -D).
func (t *ToolFlags) overrides() []string {
	switch {
	case t.level != "":
		return []string{"log.level=" + t.level}
	case t.quiet:
		return []string{"log.level=warn"}
	}
	return nil
}

// Level is --log-level ("" when not given).
func (t *ToolFlags) Level() string { return t.level }

// Apply adds the flags' overrides to opts.
func (t *ToolFlags) Apply(opts config.LoadOptions) config.LoadOptions {
	opts.Overrides = append(opts.Overrides, t.overrides()...)
	return opts
}

// Progress is where the verb writes its progress lines: w, or nowhere
// under --quiet.
func (t *ToolFlags) Progress(w io.Writer) io.Writer {
	if t.quiet {
		return io.Discard
	}
	return w
}
