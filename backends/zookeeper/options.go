package zookeeper

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/settings"
)

// Options configure the ZooKeeper backend. The zero value of each field
// means its default. They are the typed form of the `zookeeper.*` keys; see
// OptionsFromSettings and docs/zookeeper.md.
type Options struct {
	// Address is the ensemble, "host:port[,host:port...]"
	// (zookeeper.address). Required.
	Address string
	// Root is the path every node lives under (zookeeper.path.root,
	// default "/fluss"). It is created when missing.
	Root string
	// SessionTimeout is the session timeout asked of the server
	// (zookeeper.client.session-timeout, default 60s). The server clamps it
	// to its [minSessionTimeout, maxSessionTimeout].
	SessionTimeout time.Duration
	// ConnectionTimeout bounds establishing a session when a client opens
	// (zookeeper.client.connection-timeout, default 15s).
	ConnectionTimeout time.Duration
	// RetryWait is the pause before retrying a read (or another idempotent
	// call) that failed on a lost connection (zookeeper.client.retry-wait,
	// default 5s); it doubles per attempt, capped at 4 times itself.
	RetryWait time.Duration
	// MaxRetryAttempts is how many times such a call is retried
	// (zookeeper.client.max-retry-attempts, default 3). 0 means the
	// default; a negative value means no retries.
	MaxRetryAttempts int
	// MaxInFlightRequests bounds the requests one client has outstanding
	// at once (zookeeper.client.max-inflight-requests, default 100).
	MaxInFlightRequests int
	// MaxBufferSize is the largest packet the client accepts from the
	// server (zookeeper.client.max-buffer-size, default 100 MiB). It limits
	// responses (a huge child list), not values; values are limited by the
	// server's jute.maxbuffer (see MaxValueSize).
	MaxBufferSize int
	// Logf, when set, receives the client library's log lines; nil drops
	// them. The backend's own warnings (a watch on a server before 3.6)
	// go to it too, or to slog's default logger when it is nil.
	Logf func(format string, args ...any)
}

// Defaults of Options.
const (
	DefaultRoot                = "/fluss"
	DefaultSessionTimeout      = 60 * time.Second
	DefaultConnectionTimeout   = 15 * time.Second
	DefaultRetryWait           = 5 * time.Second
	DefaultMaxRetryAttempts    = 3
	DefaultMaxInFlightRequests = 100
	DefaultMaxBufferSize       = 100 << 20
)

// MaxValueSize is the largest node value the backend accepts: the server's
// default jute.maxbuffer (1 MiB - 1 byte) less room for the request's
// header, path and ACL. Larger values fail with core.ErrTooLarge before
// anything is sent (a ZooKeeper server drops the connection of a client
// that sends a packet above its limit instead of answering an error).
const MaxValueSize = 1<<20 - 8<<10

// maxRequestSize is the largest request packet sent, for a whole multi: the
// server's default jute.maxbuffer.
const maxRequestSize = 1<<20 - 1

func (o Options) withDefaults() Options {
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.ConnectionTimeout <= 0 {
		o.ConnectionTimeout = DefaultConnectionTimeout
	}
	if o.RetryWait <= 0 {
		o.RetryWait = DefaultRetryWait
	}
	if o.MaxRetryAttempts < 0 {
		o.MaxRetryAttempts = 0
	} else if o.MaxRetryAttempts == 0 {
		o.MaxRetryAttempts = DefaultMaxRetryAttempts
	}
	if o.MaxInFlightRequests <= 0 {
		o.MaxInFlightRequests = DefaultMaxInFlightRequests
	}
	if o.MaxBufferSize <= 0 {
		o.MaxBufferSize = DefaultMaxBufferSize
	}
	return o
}

// Validate checks the options and reports every problem at once, each
// naming its configuration key. It does not change o.
func (o Options) Validate() error {
	var errs []error
	if strings.TrimSpace(o.Address) == "" {
		errs = append(errs, errors.New("zookeeper.address: required (host:port[,host:port...])"))
	} else if _, err := splitServers(o.Address); err != nil {
		errs = append(errs, fmt.Errorf("zookeeper.address: %w", err))
	}
	if o.Root != "" {
		if err := core.ValidatePath(o.Root); err != nil {
			errs = append(errs, fmt.Errorf("zookeeper.path.root: %w", err))
		} else if o.Root == "/" {
			errs = append(errs, errors.New("zookeeper.path.root: must not be / (the tree needs a root of its own)"))
		}
	}
	if o.SessionTimeout < 0 {
		errs = append(errs, fmt.Errorf("zookeeper.client.session-timeout: negative (%v)", o.SessionTimeout))
	}
	if o.ConnectionTimeout < 0 {
		errs = append(errs, fmt.Errorf("zookeeper.client.connection-timeout: negative (%v)", o.ConnectionTimeout))
	}
	if o.RetryWait < 0 {
		errs = append(errs, fmt.Errorf("zookeeper.client.retry-wait: negative (%v)", o.RetryWait))
	}
	if o.MaxInFlightRequests < 0 {
		errs = append(errs, fmt.Errorf("zookeeper.client.max-inflight-requests: negative (%d)", o.MaxInFlightRequests))
	}
	if o.MaxBufferSize < 0 {
		errs = append(errs, fmt.Errorf("zookeeper.client.max-buffer-size: negative (%d)", o.MaxBufferSize))
	} else if o.MaxBufferSize > 0 && o.MaxBufferSize < 64<<10 {
		errs = append(errs, fmt.Errorf("zookeeper.client.max-buffer-size: %d bytes is below the 64 KiB minimum", o.MaxBufferSize))
	}
	return errors.Join(errs...)
}

// splitServers parses a connect string into host:port entries (port 2181
// when omitted).
func splitServers(addr string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(addr, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			return nil, fmt.Errorf("empty server in %q", addr)
		}
		if i := strings.IndexByte(s, '/'); i >= 0 {
			return nil, fmt.Errorf("%q: a chroot suffix is not supported, use zookeeper.path.root", s)
		}
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			host, port = s, "2181"
		}
		if host == "" {
			return nil, fmt.Errorf("%q: empty host", s)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%q: bad port", s)
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return out, nil
}

// OptionsFromSettings builds Options from the zookeeper.* keys of the
// flat settings the host hands Start; other keys are ignored and absent
// keys take the defaults. A max-retry-attempts of 0 means no retries. It
// checks that each value parses (errors wrap core.ErrInvalidArgument and
// name every key at fault); Validate checks the rest.
func OptionsFromSettings(m map[string]string) (Options, error) {
	r := settings.NewReader(m)
	var (
		o       Options
		address []string
		maxBuf  settings.Size
	)
	r.List("zookeeper.address", &address)
	r.String("zookeeper.path.root", &o.Root)
	r.Duration("zookeeper.client.session-timeout", &o.SessionTimeout)
	r.Duration("zookeeper.client.connection-timeout", &o.ConnectionTimeout)
	r.Duration("zookeeper.client.retry-wait", &o.RetryWait)
	r.Int("zookeeper.client.max-retry-attempts", &o.MaxRetryAttempts)
	r.Int("zookeeper.client.max-inflight-requests", &o.MaxInFlightRequests)
	r.Size("zookeeper.client.max-buffer-size", &maxBuf)
	if err := r.Err(); err != nil {
		return Options{}, fmt.Errorf("%w: %v", core.ErrInvalidArgument, err)
	}
	o.Address = strings.Join(address, ",")
	o.MaxBufferSize = int(maxBuf)
	if r.Has("zookeeper.client.max-retry-attempts") && o.MaxRetryAttempts == 0 {
		o.MaxRetryAttempts = -1 // explicitly none
	}
	return o, nil
}
