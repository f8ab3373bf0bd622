package cli

import (
	"strings"

	"github.com/spf13/cobra"
)

// nounAnnotation is the annotation of a group command (see markGroup)
// that names what its subcommands are called in help and errors.
const nounAnnotation = "metaplane/noun"

func init() {
	// Verbs are listed in the order their commands add them (admin's by
	// topic), not alphabetically.
	cobra.EnableCommandSorting = false
	cobra.AddTemplateFunc("nounOf", nounOf)
	cobra.AddTemplateFunc("usePad", usePad)
}

// nounOf is what the subcommands of c are called: "verb" for admin,
// "command" elsewhere.
func nounOf(c *cobra.Command) string {
	if n := c.Annotations[nounAnnotation]; n != "" {
		return n
	}
	return "command"
}

// usePad is the width of the widest Use of c's listed subcommands.
func usePad(c *cobra.Command) int {
	n := 0
	for _, s := range c.Commands() {
		if (s.IsAvailableCommand() || s.Name() == "help") && len(s.Use) > n {
			n = len(s.Use)
		}
	}
	return n
}

// The help and usage templates: the usage line first, then (help only)
// the description, then the subcommands with their arguments, the flags,
// and the flags shared with the parent.
const (
	usageLine = `usage: {{.UseLine}}`
	helpBody  = `{{with (or .Long .Short)}}

{{. | trimTrailingWhitespaces}}{{end}}`
	usageBody = `{{if .HasAvailableSubCommands}}

{{nounOf .}}s:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Use (usePad $)}}  {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

common flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Run ` + "`" + `{{.CommandPath}} <{{nounOf .}}> --help` + "`" + ` for a {{nounOf .}}'s flags.{{end}}
`
)

func setTemplates(root *cobra.Command) {
	root.SetUsageTemplate(usageLine + usageBody)
	root.SetHelpTemplate(usageLine + helpBody + usageBody)
}

// argsOf is the arguments part of c's Use ("<db>.<table> <partition>").
func argsOf(c *cobra.Command) string {
	_, args, _ := strings.Cut(c.Use, " ")
	return args
}

// ExactArgs is the Args of a verb that takes exactly n positional
// arguments, named in its Use.
func ExactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if n == 0 && len(args) > 0 {
			return UsageError("unexpected argument %q", args[0])
		}
		if len(args) != n {
			return UsageError("want %d argument(s) %s, got %d", n, argsOf(cmd), len(args))
		}
		return nil
	}
}

// NoArgs is the Args of a verb that takes no positional argument.
var NoArgs = ExactArgs(0)
