package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/migrate"
)

// TestOperatorMessage: the message an operator reads has no sentinel's
// package prefix at any depth, and no "invalid argument" before a
// sentence; the --json error keeps the code the prefix stood for.
func TestOperatorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
		code string
	}{
		{"invalid argument", fmt.Errorf("%w: member 3 is the leader: transfer the leadership first", core.ErrInvalidArgument),
			"member 3 is the leader: transfer the leadership first", adminapi.CodeInvalidArgument},
		{"invalid argument from the server", adminapi.FromStatus(adminapi.ToStatus(fmt.Errorf("%w: bad count", core.ErrInvalidArgument))),
			"bad count", adminapi.CodeInvalidArgument},
		{"bare invalid argument", core.ErrInvalidArgument, "invalid argument", adminapi.CodeInvalidArgument},
		{"not the leader", &core.NotLeaderError{LeaderID: "2", LeaderAddress: "h:9123"}, "not the leader (leader 2 at h:9123)", adminapi.CodeNotLeader},
		{"nested", fmt.Errorf("no coordinator leader answered (last answer from h:1: %w)", &core.NotLeaderError{}),
			"no coordinator leader answered (last answer from h:1: not the leader (leader unknown))", adminapi.CodeNotLeader},
		{"transaction", &core.TxnError{Index: 1, Err: fmt.Errorf("%w: /a", core.ErrNodeExists)},
			"transaction op 1 failed: node exists: /a", adminapi.CodeAlreadyExists},
		{"permission", fmt.Errorf("%w: User:bob may not DROP on TABLE shop.orders", adminapi.ErrPermissionDenied),
			"permission denied: User:bob may not DROP on TABLE shop.orders", adminapi.CodePermissionDenied},
		{"tree file", fmt.Errorf("f.jsonl: %w: line 5: checksum mismatch", migrate.ErrBadFile),
			"f.jsonl: bad tree file: line 5: checksum mismatch", codeError},
		{"no sentinel", fmt.Errorf("reading metadata: file is gone"), "reading metadata: file is gone", codeError},
	}
	cmd := &cobra.Command{Use: "verb"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := operatorMessage(tt.err); got != tt.want {
				t.Errorf("operatorMessage = %q, want %q", got, tt.want)
			}
			var text bytes.Buffer
			reportError(&text, cmd, tt.err, false)
			if got, want := text.String(), "verb: "+tt.want+"\n"; got != want {
				t.Errorf("text error %q, want %q", got, want)
			}
			var js bytes.Buffer
			reportError(&js, cmd, tt.err, true)
			var e jsonError
			if err := json.Unmarshal(js.Bytes(), &e); err != nil {
				t.Fatalf("--json error %q: %v", js.String(), err)
			}
			if e.Error != tt.want || e.Code != tt.code {
				t.Errorf("--json error %+v, want error %q, code %s", e, tt.want, tt.code)
			}
		})
	}
}
