package config

import (
	"fmt"
	"net"
	"strings"

	"github.com/metaplane/metaplane/settings"
)

// The keys that choose the client listener.
const (
	KeyBindListeners        = "bind.listeners"
	KeyAdvertisedListeners  = "advertised.listeners"
	KeyClientListenerName   = "client.listener.name"
	KeyInternalListenerName = "internal.listener.name"

	// DefaultClientListenerName is the name of the default listener
	// (CLIENT://127.0.0.1:9123), chosen among several when
	// internal.listener.name does not decide.
	DefaultClientListenerName = "CLIENT"
)

// Listener is one NAME://host:port entry of bind.listeners or
// advertised.listeners.
type Listener struct {
	Name string // as configured (names compare without regard to case)
	Host string // may be empty or a wildcard (0.0.0.0, ::) in bind.listeners
	Port int    // 0 in bind.listeners: any free port
}

// Address returns host:port.
func (l Listener) Address() string { return net.JoinHostPort(l.Host, fmt.Sprint(l.Port)) }

// String returns NAME://host:port.
func (l Listener) String() string { return l.Name + "://" + l.Address() }

// ClientListenerChoice is the listener that serves clients (the admin API,
// the tablet-server RPCs, grpc.health.v1) and why it was chosen.
type ClientListenerChoice struct {
	// Bind is the bind.listeners entry to listen on.
	Bind Listener
	// Advertised is the advertised.listeners entry of the same name, or
	// nil when there is none (then the bound address is advertised).
	Advertised *Listener
	// Reason says why this listener serves clients, naming the key that
	// decided ("the only entry of bind.listeners", ...), for the banner.
	Reason string
	// Unbound are the other bind.listeners entries, which metaplane does
	// not serve.
	Unbound []Listener
}

// ClientListener returns the listener that serves clients:
//
//   - the only entry of bind.listeners, whatever its name;
//   - with several, the one named by client.listener.name;
//   - with several and no client.listener.name, the one entry not named by
//     internal.listener.name; if that leaves several, the one named CLIENT.
//
// Names compare without regard to case. It fails, naming the keys, when
// bind.listeners is empty or malformed, when client.listener.name names no
// entry, or when the choice is ambiguous. Load refuses a configuration for
// which it fails, so on a loaded Config it does not fail. Safe for
// concurrent use.
func (c *Config) ClientListener() (ClientListenerChoice, error) {
	var all []Listener
	for _, s := range c.BindListeners {
		l, err := ParseListener(s)
		if err != nil {
			return ClientListenerChoice{}, &keyError{KeyBindListeners, err.Error()}
		}
		all = append(all, l)
	}
	names := make([]string, len(all))
	for i, l := range all {
		names[i] = l.Name
	}
	var pick int
	var reason string
	switch want := strings.TrimSpace(c.ClientListenerName); {
	case len(all) == 0:
		return ClientListenerChoice{}, &keyError{KeyBindListeners, "must name at least one listener, e.g. CLIENT://127.0.0.1:9123"}
	case want != "":
		pick = -1
		for i, l := range all {
			if strings.EqualFold(l.Name, want) {
				pick = i
			}
		}
		if pick < 0 {
			return ClientListenerChoice{}, &keyError{KeyClientListenerName, fmt.Sprintf("%s is not one of %s' names (%s)", want, KeyBindListeners, strings.Join(names, ", "))}
		}
		reason = KeyClientListenerName + "=" + want
	case len(all) == 1:
		reason = "the only entry of " + KeyBindListeners
	default:
		pick = -1
		var rest []string
		for i, l := range all {
			if !strings.EqualFold(l.Name, c.InternalListenerName) {
				pick = i
				rest = append(rest, l.Name)
			}
		}
		if len(rest) > 1 {
			// metaplane's own earlier rule: the listener named CLIENT.
			for i, l := range all {
				if strings.EqualFold(l.Name, DefaultClientListenerName) {
					pick, rest = i, []string{l.Name}
					reason = "the entry of " + KeyBindListeners + " named " + DefaultClientListenerName
				}
			}
		}
		if len(rest) != 1 {
			return ClientListenerChoice{}, &keyError{KeyClientListenerName, fmt.Sprintf("required: %s lists %d listeners (%s) and %s=%s leaves %d of them for clients, none named CLIENT; set %s to the one that serves clients",
				KeyBindListeners, len(all), strings.Join(names, ", "), KeyInternalListenerName, c.InternalListenerName, len(rest), KeyClientListenerName)}
		}
		if reason == "" {
			reason = "the entry of " + KeyBindListeners + " not named by " + KeyInternalListenerName + "=" + c.InternalListenerName
		}
	}
	ch := ClientListenerChoice{Bind: all[pick], Reason: reason}
	for i, l := range all {
		if i != pick {
			ch.Unbound = append(ch.Unbound, l)
		}
	}
	for _, s := range c.AdvertisedListeners {
		l, err := ParseListener(s)
		if err != nil {
			return ClientListenerChoice{}, &keyError{KeyAdvertisedListeners, err.Error()}
		}
		if strings.EqualFold(l.Name, ch.Bind.Name) {
			ch.Advertised = &l
		}
	}
	return ch, nil
}

// ParseListener parses NAME://host:port (port 0 allowed; host may be
// empty or a wildcard). Errors name the entry and what is wrong.
func ParseListener(s string) (Listener, error) {
	name, addr, ok := strings.Cut(strings.TrimSpace(s), "://")
	if !ok || !validListenerName(name) {
		return Listener{}, fmt.Errorf("%q: want NAME://host:port, e.g. CLIENT://127.0.0.1:9123", s)
	}
	host, port, err := settings.ParseHostPort(addr, true)
	if err != nil {
		return Listener{}, fmt.Errorf("%q: %v", s, err)
	}
	return Listener{Name: name, Host: host, Port: port}, nil
}

// IsWildcardHost reports whether host binds every interface ("", 0.0.0.0,
// ::), so that it cannot be given to others as an address.
func IsWildcardHost(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// keyError is an error about one key; validate turns it into a problem.
type keyError struct{ key, msg string }

func (e *keyError) Error() string { return e.key + ": " + e.msg }
