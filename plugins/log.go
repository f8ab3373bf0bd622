package plugins

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"
)

// Logging across the boundary: the plugin writes JSON lines in hclog's
// format (@level, @message, @timestamp, then attributes) to its original
// stderr; go-plugin on the host parses them and logs them through an
// hclog.Logger named after the plugin binary, which slogLogger adapts to
// the host's *slog.Logger with a "plugin" attribute.

// levelTrace is hclog's trace level in slog terms.
const levelTrace = slog.LevelDebug - 4

// slogLogger is an hclog.Logger writing to a *slog.Logger.
type slogLogger struct {
	l       *slog.Logger
	name    string
	implied []any
	level   *hclog.Level
}

// newHCLogger adapts l for go-plugin. name labels every record ("plugin"
// attribute).
func newHCLogger(l *slog.Logger, name string) hclog.Logger {
	lvl := hclog.Trace
	return &slogLogger{l: l, name: name, level: &lvl}
}

func (s *slogLogger) Log(level hclog.Level, msg string, args ...any) {
	var sl slog.Level
	switch level {
	case hclog.Trace:
		sl = levelTrace
	case hclog.Debug, hclog.NoLevel:
		sl = slog.LevelDebug
	case hclog.Info:
		sl = slog.LevelInfo
	case hclog.Warn:
		sl = slog.LevelWarn
	case hclog.Error:
		sl = slog.LevelError
	default:
		return
	}
	if !s.l.Enabled(context.Background(), sl) {
		return
	}
	when := time.Now()
	attrs := make([]any, 0, 2+len(s.implied)+len(args))
	if s.name != "" {
		attrs = append(attrs, "plugin", s.name)
	}
	attrs = append(attrs, s.implied...)
	for i := 0; i < len(args); i += 2 {
		k, ok := args[i].(string)
		if !ok || i+1 >= len(args) {
			attrs = append(attrs, args[i:]...)
			break
		}
		switch k {
		case "timestamp":
			// go-plugin adds the time the plugin logged at: it becomes the
			// record's time, so that a line has one time field.
			if v, ok := args[i+1].(string); ok {
				if t, err := time.Parse(hclog.TimeFormat, v); err == nil {
					when = t
					continue
				}
			}
		case "plugin":
			// go-plugin's own lines name the plugin by its path: one
			// "plugin" attribute is enough.
			if s.name != "" {
				k = "path"
			}
		}
		attrs = append(attrs, k, args[i+1])
	}
	r := slog.NewRecord(when, sl, msg, 0)
	r.Add(attrs...)
	_ = s.l.Handler().Handle(context.Background(), r)
}

func (s *slogLogger) Trace(msg string, args ...any) { s.Log(hclog.Trace, msg, args...) }
func (s *slogLogger) Debug(msg string, args ...any) { s.Log(hclog.Debug, msg, args...) }
func (s *slogLogger) Info(msg string, args ...any)  { s.Log(hclog.Info, msg, args...) }
func (s *slogLogger) Warn(msg string, args ...any)  { s.Log(hclog.Warn, msg, args...) }
func (s *slogLogger) Error(msg string, args ...any) { s.Log(hclog.Error, msg, args...) }

func (s *slogLogger) enabled(l slog.Level) bool { return s.l.Enabled(context.Background(), l) }
func (s *slogLogger) IsTrace() bool             { return s.enabled(levelTrace) }
func (s *slogLogger) IsDebug() bool             { return s.enabled(slog.LevelDebug) }
func (s *slogLogger) IsInfo() bool              { return s.enabled(slog.LevelInfo) }
func (s *slogLogger) IsWarn() bool              { return s.enabled(slog.LevelWarn) }
func (s *slogLogger) IsError() bool             { return s.enabled(slog.LevelError) }
func (s *slogLogger) ImpliedArgs() []any        { return s.implied }

func (s *slogLogger) With(args ...any) hclog.Logger {
	c := *s
	c.implied = append(append([]any(nil), s.implied...), args...)
	return &c
}

func (s *slogLogger) Name() string { return s.name }

// Named keeps the plugin's name: go-plugin names its stderr logger after
// the binary, which is the plugin.
func (s *slogLogger) Named(name string) hclog.Logger {
	c := *s
	if c.name == "" {
		c.name = name
	}
	return &c
}

func (s *slogLogger) ResetNamed(name string) hclog.Logger {
	c := *s
	c.name = name
	return &c
}

func (s *slogLogger) SetLevel(level hclog.Level) { *s.level = level }

func (s *slogLogger) GetLevel() hclog.Level {
	switch {
	case s.IsTrace():
		return hclog.Trace
	case s.IsDebug():
		return hclog.Debug
	case s.IsInfo():
		return hclog.Info
	case s.IsWarn():
		return hclog.Warn
	case s.IsError():
		return hclog.Error
	}
	return hclog.Off
}

func (s *slogLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(s.StandardWriter(opts), "", 0)
}

func (s *slogLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &lineLogger{log: func(line string) { s.Info(line) }}
}

// lineLogger logs every complete line written to it.
type lineLogger struct {
	mu  sync.Mutex
	buf bytes.Buffer
	log func(line string)
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			return len(p), nil
		}
		line := strings.TrimRight(string(w.buf.Next(i+1)), "\r\n")
		if line != "" {
			w.log(line)
		}
	}
}

// pluginLogHandler returns the slog handler a plugin process logs with:
// JSON lines in hclog's shape on w (the plugin's original stderr), which
// the host parses and re-logs under the plugin's name.
func pluginLogHandler(w io.Writer, level slog.Leveler) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				lvl, _ := a.Value.Any().(slog.Level)
				return slog.String("@level", hclogLevelName(lvl))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	})
}

func hclogLevelName(l slog.Level) string {
	switch {
	case l < slog.LevelDebug:
		return "trace"
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	}
	return "error"
}

// pluginHCLogger is the hclog.Logger go-plugin's server side uses inside
// the plugin process (JSON on the original stderr).
func pluginHCLogger(w io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Output:     w,
		Level:      hclog.Info,
		JSONFormat: true,
	})
}
