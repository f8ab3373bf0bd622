package conformance

import "testing"

func TestClosureFree(t *testing.T) {
	for in, want := range map[string]string{
		"plugins.(*Client).Children.func1":   "plugins.(*Client).Children",
		"plugins.(*Client).Children.func1.2": "plugins.(*Client).Children",
		"plugins.(*Client).Children":         "plugins.(*Client).Children",
		"conformance.readProperties.func4":   "conformance.readProperties",
		"zookeeper.(*Backend).function":      "zookeeper.(*Backend).function",
		"memory.glob..func1":                 "memory.glob.",
		"raft.(*member).propose.deferwrap1":  "raft.(*member).propose.deferwrap1",
	} {
		if got := closureFree(in); got != want {
			t.Errorf("closureFree(%q) = %q, want %q", in, got, want)
		}
	}
}
