package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFakePlugin writes an executable metaplane-backend-<name> into dir that
// answers the describe mode with desc (JSON), as a real plugin binary does.
// Describe only runs the binary, so a script is a faithful stand-in here.
func writeFakePlugin(t *testing.T, dir, name, desc string) {
	t.Helper()
	script := "#!/bin/sh\nif [ \"$1\" = --describe ] || [ \"$1\" = describe ]; then\n  echo '" + desc + "'\n  exit 0\nfi\necho 'not a real plugin' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(dir, "metaplane-backend-"+name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidateThirdPartySelector(t *testing.T) {
	dir := t.TempDir()
	writeFakePlugin(t, dir, "etcd", `{"name":"etcd","selector_key":"etcd.endpoints","description":"etcd","protocol_versions":[1]}`)
	pluginDir := "metadata.backend.plugin.dir=" + dir

	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"its key alone selects it",
			[]string{"-D", pluginDir, "-D", "etcd.endpoints=127.0.0.1:2379", "-D", "etcd.dial-timeout=5s"},
			ExitOK, "etcd.endpoints"},
		{"its key and zookeeper.address are refused, naming both",
			[]string{"-D", pluginDir, "-D", "etcd.endpoints=127.0.0.1:2379", "-D", "zookeeper.address=127.0.0.1:2181"},
			ExitFailure, "zookeeper.address"},
		{"its key present but empty is an error",
			[]string{"-D", pluginDir, "-D", "etcd.endpoints="},
			ExitFailure, "etcd.endpoints"},
		{"without the plugin its key is unknown",
			[]string{"-D", "etcd.endpoints=127.0.0.1:2379"},
			ExitFailure, "etcd.endpoints"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := runCLI(t, append([]string{"config", "validate", "--no-env"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout, stderr)
			}
			if !strings.Contains(stdout, tt.want) {
				t.Errorf("output does not name %s:\n%s", tt.want, stdout)
			}
		})
	}

	// The refusal names every key that was set.
	stdout, _, _ := runCLI(t, "config", "validate", "--no-env", "-D", pluginDir,
		"-D", "etcd.endpoints=127.0.0.1:2379", "-D", "zookeeper.address=127.0.0.1:2181")
	if !strings.Contains(stdout, "etcd.endpoints") || !strings.Contains(stdout, "zookeeper.address") {
		t.Errorf("refusal does not name both keys:\n%s", stdout)
	}
	// The selected backend is reported by name.
	stdout, _, _ = runCLI(t, "config", "validate", "--no-env", "-D", pluginDir, "-D", "etcd.endpoints=127.0.0.1:2379")
	if !strings.Contains(stdout, "etcd") {
		t.Errorf("selection output does not name the etcd backend:\n%s", stdout)
	}
}

func TestConfigValidateBrokenPluginNamed(t *testing.T) {
	dir := t.TempDir()
	writeFakePlugin(t, dir, "etcd", `{"name":"consul","selector_key":"consul.address","protocol_versions":[1]}`)
	stdout, _, code := runCLI(t, "config", "validate", "--no-env", "-D", "metadata.backend.plugin.dir="+dir)
	if code != ExitFailure {
		t.Fatalf("exit %d, want %d: a plugin whose declared name differs from its file is refused\n%s", code, ExitFailure, stdout)
	}
	if !strings.Contains(stdout, "metadata.backend.plugin.dir") || !strings.Contains(stdout, "metaplane-backend-etcd") {
		t.Errorf("problem does not name the key and the file:\n%s", stdout)
	}
}
