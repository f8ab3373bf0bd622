package config

import (
	"strings"
)

// EnvPrefix starts every environment variable that sets a configuration key.
// A key maps to its variable by upper-casing it, writing each "-" as "__"
// and each "." as "_", after the prefix:
// coordinator.raft.first-election.timeout is
// METAPLANE_COORDINATOR_RAFT_FIRST__ELECTION_TIMEOUT. The mapping is
// reversible because keys never contain "_" (see EnvName, KeyForEnv).
const EnvPrefix = "METAPLANE_"

// reservedEnvSegments are the first key segments of METAPLANE_* variables
// that are not configuration: METAPLANE_CONFIG (the default file),
// METAPLANE_BIN_DIR and METAPLANE_SOAK (tests), METAPLANE_BACKEND_PLUGIN
// (the plugin handshake cookie), METAPLANE_JAVA and METAPLANE_ZK_* (the
// test ZooKeeper server), METAPLANE_ADMIN_* (the admin command's client
// TLS files), and METAPLANE_TEST_*, METAPLANE_PLUGIN_*. Load ignores them instead of refusing them as
// unknown keys. No configuration key may start with one of these segments.
var reservedEnvSegments = map[string]bool{
	"bin": true, "soak": true, "config": true, "test": true, "plugin": true,
	"backend": true, "java": true, "zk": true, "admin": true,
}

// IsReservedEnv reports whether an environment variable starting with
// EnvPrefix is reserved for something other than configuration, so that
// Load ignores it (see LoadOptions.Env).
func IsReservedEnv(name string) bool {
	key, ok := KeyForEnv(name)
	return ok && reservedEnvSegments[firstSegment(key)]
}

// EnvName returns the environment variable that sets key (see EnvPrefix).
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(strings.ReplaceAll(key, "-", "__"), ".", "_"))
}

// KeyForEnv returns the key an environment variable sets: the inverse of
// EnvName. ok is false when name does not start with EnvPrefix or does not
// spell a well-formed key (empty segment, stray "_").
func KeyForEnv(name string) (key string, ok bool) {
	rest, found := strings.CutPrefix(name, EnvPrefix)
	if !found || rest == "" {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case c == '_' && i+1 < len(rest) && rest[i+1] == '_':
			b.WriteByte('-')
			i++
		case c == '_':
			b.WriteByte('.')
		case c >= 'A' && c <= 'Z':
			b.WriteByte(c + ('a' - 'A'))
		case c >= '0' && c <= '9':
			b.WriteByte(c)
		default:
			return "", false
		}
	}
	key = b.String()
	for _, seg := range strings.Split(key, ".") {
		if seg == "" || strings.HasPrefix(seg, "-") || strings.HasSuffix(seg, "-") {
			return "", false
		}
	}
	return key, true
}
