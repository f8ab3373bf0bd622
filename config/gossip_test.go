package config

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
)

func TestGossipKey(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	b64 := base64.StdEncoding.EncodeToString(key)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	short := filepath.Join(dir, "short.key")
	os.WriteFile(good, []byte("  "+b64+"\n"), 0o600)
	os.WriteFile(short, []byte(base64.StdEncoding.EncodeToString([]byte("abc"))), 0o600)

	for _, over := range [][]string{
		{"coordinator.gossip.encryption-key=" + b64},
		{"coordinator.gossip.encryption-key-file=" + good},
	} {
		cfg, err := Load(LoadOptions{Overrides: append(over, "coordinator.gossip.enabled=true")})
		if err != nil {
			t.Fatalf("%v: %v", over, err)
		}
		got, err := cfg.GossipKey()
		if err != nil || !bytes.Equal(got, key) {
			t.Fatalf("%v: GossipKey() = %x, %v; want %x", over, got, err, key)
		}
	}
	if cfg, err := Load(LoadOptions{}); err != nil {
		t.Fatal(err)
	} else if k, err := cfg.GossipKey(); k != nil || err != nil {
		t.Fatalf("no key configured: GossipKey() = %x, %v; want nil, nil", k, err)
	}

	tests := []struct {
		set       []string
		key, frag string
	}{
		{[]string{"coordinator.gossip.encryption-key=not base64!"}, "coordinator.gossip.encryption-key", "not base64"},
		{[]string{"coordinator.gossip.encryption-key=" + base64.StdEncoding.EncodeToString(make([]byte, 20))}, "coordinator.gossip.encryption-key", "decodes to 20 bytes: want 16, 24 or 32"},
		{[]string{"coordinator.gossip.encryption-key=" + b64, "coordinator.gossip.encryption-key-file=" + good}, "coordinator.gossip.encryption-key", "not both"},
		{[]string{"coordinator.gossip.encryption-key-file=" + short}, "coordinator.gossip.encryption-key-file", "decodes to 3 bytes"},
		{[]string{"coordinator.gossip.encryption-key-file=" + filepath.Join(dir, "missing")}, "coordinator.gossip.encryption-key-file", "cannot read"},
	}
	for _, tt := range tests {
		_, err := Load(LoadOptions{Overrides: tt.set})
		wantProblem(t, err, tt.key, tt.frag)
	}
}

// TestPluginSettingsWithholdTheGossipKey: the settings handed to a backend
// plugin carry every key Flatten does except the inline gossip key.
func TestPluginSettingsWithholdTheGossipKey(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	cfg, err := Load(LoadOptions{Overrides: []string{"coordinator.gossip.enabled=true", "coordinator.gossip.encryption-key=" + b64}})
	if err != nil {
		t.Fatal(err)
	}
	flat, ps := cfg.Flatten(), cfg.PluginSettings()
	if flat["coordinator.gossip.encryption-key"] != b64 {
		t.Fatalf("Flatten lacks the key it must round-trip: %q", flat["coordinator.gossip.encryption-key"])
	}
	if v, ok := ps["coordinator.gossip.encryption-key"]; ok {
		t.Errorf("PluginSettings hands the gossip key to the plugin: %q", v)
	}
	delete(flat, "coordinator.gossip.encryption-key")
	if len(flat) != len(ps) {
		t.Errorf("PluginSettings has %d keys, want Flatten's %d less the gossip key", len(ps), len(flat))
	}
	for k, v := range flat {
		if ps[k] != v {
			t.Errorf("PluginSettings[%s] = %q, want %q", k, ps[k], v)
		}
	}
}
