package cli

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func init() { Register(newVersionCmd) }

// readBuildInfo is debug.ReadBuildInfo; tests replace it.
var readBuildInfo = debug.ReadBuildInfo

// versionInfo is what `metaplane version` prints; its --json field order
// is stable.
type versionInfo struct {
	Module   string `json:"module"`   // the main module's path
	Version  string `json:"version"`  // its version: a tag, a pseudo-version, or (devel)
	Commit   string `json:"commit"`   // the VCS revision, "" when the build did not stamp one
	Time     string `json:"time"`     // the revision's commit time, "" when unknown
	Modified bool   `json:"modified"` // the work tree had uncommitted changes
	Go       string `json:"go"`       // the Go toolchain that built the binary
	Platform string `json:"platform"` // GOOS/GOARCH
}

// versionOf reads the binary's build information. A build without VCS
// stamping (go build -buildvcs=false, or outside a checkout) has no
// commit; one without build information at all reports "unknown".
func versionOf(read func() (*debug.BuildInfo, bool)) versionInfo {
	v := versionInfo{Module: "unknown", Version: "unknown", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := read()
	if !ok {
		return v
	}
	if bi.Main.Path != "" {
		v.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// Text is the human form of v, also what --version prints.
func (v versionInfo) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "metaplane %s\n", v.Version)
	fmt.Fprintf(&b, "  module: %s\n", v.Module)
	commit := "unknown (built without VCS information)"
	if v.Commit != "" {
		commit = v.Commit
		if v.Time != "" {
			commit += " (" + v.Time + ")"
		}
		if v.Modified {
			commit += ", modified"
		}
	}
	fmt.Fprintf(&b, "  commit: %s\n", commit)
	fmt.Fprintf(&b, "  go:     %s %s\n", v.Go, v.Platform)
	return b.String()
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "print the version, commit and Go version of this binary",
		Long: `Prints the module version, the VCS commit it was built from (and whether
the work tree was modified) and the Go toolchain, from the binary's build
information. A binary built without VCS stamping (-buildvcs=false) says
"commit: unknown". metaplane --version prints the same text.`,
		Args: NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versionOf(readBuildInfo)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			_, err := fmt.Fprint(cmd.OutOrStdout(), v.Text())
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the version as a JSON object")
	return cmd
}
