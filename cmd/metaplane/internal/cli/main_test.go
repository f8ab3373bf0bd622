package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes what the tests built once per process (the broken
// plugin) after every test has run.
func TestMain(m *testing.M) {
	code := m.Run()
	if brokenPath != "" && brokenErr == nil {
		os.RemoveAll(filepath.Dir(brokenPath))
	}
	os.Exit(code)
}
