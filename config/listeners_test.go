package config

import (
	"errors"
	"strings"
	"testing"
)

func TestClientListener(t *testing.T) {
	tests := []struct {
		name       string
		overrides  []string
		bind       string // want Bind.String()
		advertised string // want Advertised.String(), "" for none
		reason     string // a substring of Reason
		errKey     string // want a problem of this key instead
		errWant    []string
	}{
		{name: "default", bind: "CLIENT://127.0.0.1:9123", reason: "the only entry of bind.listeners"},
		{name: "one listener of the original's name", overrides: []string{"bind.listeners=FLUSS://0.0.0.0:9123"},
			bind: "FLUSS://0.0.0.0:9123", reason: "the only entry"},
		{name: "one listener named like internal.listener.name", overrides: []string{"bind.listeners=INTERNAL://127.0.0.1:9123", "internal.listener.name=INTERNAL"},
			bind: "INTERNAL://127.0.0.1:9123", reason: "the only entry"},
		{name: "two, the internal one left out", overrides: []string{"bind.listeners=FLUSS://10.0.0.1:9123,CLIENT://0.0.0.0:9124"},
			bind: "CLIENT://0.0.0.0:9124", reason: "not named by internal.listener.name=FLUSS"},
		{name: "internal name compared without case", overrides: []string{"bind.listeners=fluss://10.0.0.1:9123,EXTERNAL://0.0.0.0:9124"},
			bind: "EXTERNAL://0.0.0.0:9124", reason: "internal.listener.name=FLUSS"},
		{name: "client.listener.name decides", overrides: []string{"bind.listeners=FLUSS://10.0.0.1:9123,CLIENT://0.0.0.0:9124", "client.listener.name=fluss"},
			bind: "FLUSS://10.0.0.1:9123", reason: "client.listener.name=fluss"},
		{name: "advertised entry of the chosen name", overrides: []string{"bind.listeners=FLUSS://10.0.0.1:9123,CLIENT://0.0.0.0:9124",
			"advertised.listeners=FLUSS://fluss-1.internal:9123,CLIENT://coord-1.example.com:9124"},
			bind: "CLIENT://0.0.0.0:9124", advertised: "CLIENT://coord-1.example.com:9124", reason: "internal.listener.name"},
		{name: "ambiguous", overrides: []string{"bind.listeners=A://127.0.0.1:1,B://127.0.0.1:2"},
			errKey: "client.listener.name", errWant: []string{"bind.listeners lists 2 listeners (A, B)", "internal.listener.name=FLUSS leaves 2", "set client.listener.name"}},
		{name: "several left, one named CLIENT", overrides: []string{"bind.listeners=INTERNAL://127.0.0.1:1,client://127.0.0.1:2"},
			bind: "client://127.0.0.1:2", reason: "named CLIENT"},
		{name: "all internal", overrides: []string{"bind.listeners=A://127.0.0.1:1,B://127.0.0.1:2", "internal.listener.name=A", "client.listener.name="},
			bind: "B://127.0.0.1:2", reason: "internal.listener.name=A"},
		{name: "client.listener.name names no entry", overrides: []string{"bind.listeners=FLUSS://127.0.0.1:1", "client.listener.name=CLIENT"},
			errKey: "client.listener.name", errWant: []string{"CLIENT is not one of bind.listeners' names (FLUSS)"}},
		{name: "empty", overrides: []string{"bind.listeners="},
			errKey: "bind.listeners", errWant: []string{"must name at least one listener"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Load(LoadOptions{Overrides: tt.overrides})
			if tt.errKey != "" {
				var ce *Error
				if !errors.As(err, &ce) {
					t.Fatalf("Load: got %v, want a problem of %s", err, tt.errKey)
				}
				found := false
				for _, p := range ce.Problems {
					if p.Key == tt.errKey {
						found = true
						for _, w := range tt.errWant {
							if !strings.Contains(p.Message, w) {
								t.Errorf("problem %q lacks %q", p.Message, w)
							}
						}
					}
				}
				if !found {
					t.Errorf("problems %v: none of %s", ce.Problems, tt.errKey)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ch, err := cfg.ClientListener()
			if err != nil {
				t.Fatal(err)
			}
			if got := ch.Bind.String(); got != tt.bind {
				t.Errorf("Bind: got %s, want %s", got, tt.bind)
			}
			got := ""
			if ch.Advertised != nil {
				got = ch.Advertised.String()
			}
			if got != tt.advertised {
				t.Errorf("Advertised: got %q, want %q", got, tt.advertised)
			}
			if !strings.Contains(ch.Reason, tt.reason) {
				t.Errorf("Reason %q lacks %q", ch.Reason, tt.reason)
			}
			if len(ch.Unbound) != len(cfg.BindListeners)-1 {
				t.Errorf("Unbound %v: want the %d other entries", ch.Unbound, len(cfg.BindListeners)-1)
			}
		})
	}
}

// TestDataDirParentOfRaftDir: coordinator.raft.dir defaults to
// <data.dir>/raft; set, it is kept; the plugin side (FromFlat) sees the
// same directory.
func TestDataDirParentOfRaftDir(t *testing.T) {
	for _, tt := range []struct {
		overrides []string
		want      string
	}{
		{nil, "./data/raft"},
		{[]string{"data.dir=/var/lib/metaplane"}, "/var/lib/metaplane/raft"},
		{[]string{"data.dir=/var/lib/metaplane/"}, "/var/lib/metaplane/raft"},
		{[]string{"data.dir=/var/lib/metaplane", "coordinator.raft.dir=/srv/raft"}, "/srv/raft"},
	} {
		cfg, err := Load(LoadOptions{Overrides: tt.overrides})
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Coordinator.Raft.Dir; got != tt.want {
			t.Errorf("%v: coordinator.raft.dir %q, want %q", tt.overrides, got, tt.want)
		}
		back, err := FromFlat(cfg.Flatten())
		if err != nil {
			t.Fatal(err)
		}
		if got := back.Coordinator.Raft.Dir; got != tt.want {
			t.Errorf("%v: after FromFlat coordinator.raft.dir %q, want %q", tt.overrides, got, tt.want)
		}
	}
}

func TestLogKeys(t *testing.T) {
	cfg, err := Load(LoadOptions{Env: []string{"METAPLANE_LOG_LEVEL=debug", "METAPLANE_LOG_FORMAT=json"}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Log.Level != "debug" || cfg.Log.Format != "json" {
		t.Errorf("from the environment: log %+v, want debug and json", cfg.Log)
	}
	_, err = Load(LoadOptions{Overrides: []string{"log.level=loud", "log.format=xml"}})
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("Load: got %v, want problems", err)
	}
	got := map[string]string{}
	for _, p := range ce.Problems {
		got[p.Key] = p.Message
	}
	if !strings.Contains(got["log.level"], "want one of debug, info, warn, error") {
		t.Errorf("log.level problem %q", got["log.level"])
	}
	if !strings.Contains(got["log.format"], "want one of text, json") {
		t.Errorf("log.format problem %q", got["log.format"])
	}
}
