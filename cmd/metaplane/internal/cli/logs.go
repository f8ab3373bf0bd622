package cli

import (
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"

	"github.com/metaplane/metaplane/core/config"
)

// newLogger returns a process's logger on w, by log.level and log.format:
// text (logfmt) or JSON lines, each with the attribute process=name.
func newLogger(w io.Writer, name string, lc config.LogConfig) *slog.Logger {
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
