package cli

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// legacyLongFlags rewrites the single-dash spelling of a long flag, which
// the command line accepted before it moved to pflag (-json,
// -config=FILE, -bootstrap-servers host:port), into the double-dash
// spelling pflag parses. It follows args down the command tree so it knows
// the flags of the command they select (the parents' persistent flags
// included): an argument is rewritten only when its name is one of those
// long flags, or when its first letter is no short flag (so that an
// unknown -name is reported as --name); short flags (-D key=value,
// -Dkey=value, -v, -h) and positional arguments are left alone, and so are
// flag values and everything after "--". Shell-completion requests are passed through.
func legacyLongFlags(root *cobra.Command, args []string) []string {
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		return args
	}
	out := make([]string, 0, len(args))
	cmd := root
	for i := 0; i < len(args); i++ {
		s := args[i]
		if s == "--" {
			return append(out, args[i:]...)
		}
		var f *pflag.Flag
		var inline bool // the value is in s (--name=value)
		switch {
		case strings.HasPrefix(s, "--"):
			var name string
			name, _, inline = strings.Cut(s[2:], "=")
			f = lookupFlag(cmd, name)
		case len(s) == 2 && s[0] == '-':
			f = lookupShorthand(cmd, s[1:])
		case len(s) > 2 && s[0] == '-':
			var name string
			name, _, inline = strings.Cut(s[1:], "=")
			if f = lookupFlag(cmd, name); f != nil || lookupShorthand(cmd, s[1:2]) == nil {
				// A long flag, or no run of short flags: an unknown one is
				// then reported as --name, not as its first letter.
				s = "-" + s
			}
		default:
			if sub := subcommand(cmd, s); sub != nil {
				cmd = sub
			}
		}
		out = append(out, s)
		if f != nil && !inline && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// lookupFlag finds the long flag name of cmd, inherited ones and the
// lazily added --help and --version included.
func lookupFlag(cmd *cobra.Command, name string) *pflag.Flag {
	if len(name) < 2 {
		return nil
	}
	cmd.InitDefaultHelpFlag()
	cmd.InitDefaultVersionFlag()
	cmd.InheritedFlags() // merges the parents' persistent flags into Flags
	return cmd.Flags().Lookup(name)
}

// lookupShorthand finds the one-letter flag c of cmd.
func lookupShorthand(cmd *cobra.Command, c string) *pflag.Flag {
	cmd.InheritedFlags()
	return cmd.Flags().ShorthandLookup(c)
}

// subcommand is the subcommand of cmd called name, or nil.
func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, sub := range cmd.Commands() {
		if sub.Name() == name || sub.HasAlias(name) {
			return sub
		}
	}
	return nil
}
