package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/spf13/cobra"

	"github.com/metaplane/metaplane/adminclient"
	"github.com/metaplane/metaplane/catalog"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/migrate"
)

// usageErr is a mistake on the command line: an unknown verb or flag, a
// missing or extra argument, a bad flag value, or a combination a verb
// refuses before doing anything. It exits ExitUsage and is printed with a
// hint to the command's --help.
type usageErr struct{ msg string }

func (e *usageErr) Error() string { return e.msg }

func UsageError(format string, args ...any) error {
	return &usageErr{msg: fmt.Sprintf(format, args...)}
}

// exitStatus ends a verb that has already reported its outcome (a report
// on stdout naming every problem, or a help text) with code, printing
// nothing more.
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func ExitWith(code int) error { return &exitStatus{code: code} }

// WithCause is an error whose message replaces its cause's, which
// errors.Is and errors.As still find.
type WithCause struct {
	Msg   string
	Cause error
}

func (e *WithCause) Error() string { return e.Msg }
func (e *WithCause) Unwrap() error { return e.Cause }

// CodedErr is an error of the admin API with the code of its
// ErrorDetail, which the client's conversion of the answer drops.
type CodedErr struct {
	Err  error
	Code string
}

func (e *CodedErr) Error() string { return e.Err.Error() }
func (e *CodedErr) Unwrap() error { return e.Err }

// exitCode is the exit status of a command line whose verb returned err:
// the one place where errors become exit codes.
func exitCode(err error) int {
	var st *exitStatus
	var ue *usageErr
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &st):
		return st.code
	case errors.As(err, &ue):
		return ExitUsage
	case errors.Is(err, adminclient.ErrOutcomeUnknown):
		return ExitOutcomeUnknown
	default:
		return ExitFailure
	}
}

// Codes of the --json error object besides the admin API's error codes.
const (
	codeUsage          = "USAGE"           // a usage error (exit 2)
	codeOutcomeUnknown = "OUTCOME_UNKNOWN" // a write whose outcome is unknown (exit 3)
	codeError          = "ERROR"           // any other failure without an admin API code
)

// errorCode is the code of err in the --json error object: USAGE for a
// usage error, OUTCOME_UNKNOWN for a write whose outcome is unknown, else the admin API's ErrorDetail code (NOT_FOUND,
// ALREADY_EXISTS, ..., see docs/admin.md) when the answer carried one,
// or when err is one of the errors the admin API's translation table
// maps (a timeout is UNAVAILABLE), else ERROR.
func errorCode(err error) string {
	var ue *usageErr
	if errors.As(err, &ue) {
		return codeUsage
	}
	if errors.Is(err, adminclient.ErrOutcomeUnknown) {
		return codeOutcomeUnknown
	}
	var ce *CodedErr
	if errors.As(err, &ce) && ce.Code != "" {
		return ce.Code
	}
	if d := adminapi.DetailOf(err); d != nil && d.Code != "" {
		return d.Code
	}
	if d := adminapi.DetailOf(adminapi.ToStatus(err)); d != nil && d.Code != "" && d.Code != adminapi.CodeInternal {
		return d.Code
	}
	return codeError
}

// jsonError is the --json form of an error, one line on stderr.
type jsonError struct {
	Error   string `json:"error"`
	Code    string `json:"code"`
	Command string `json:"command"`
	// Field is the request field the coordinator named (ErrorDetail.field,
	// "descriptor.bucket_count"); omitted when it named none.
	Field string `json:"field,omitempty"`
}

// reportError prints the error a verb of cmd returned on w: as
// "<command path>: <message>" (a usage error adds a line pointing to
// --help), or as one JSON object when the verb was given --json. An
// exitStatus prints nothing: its verb has reported already.
func reportError(w io.Writer, cmd *cobra.Command, err error, asJSON bool) {
	var st *exitStatus
	if errors.As(err, &st) {
		return
	}
	path := cmd.CommandPath()
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		je := jsonError{Error: operatorMessage(err), Code: errorCode(err), Command: path}
		if fe, ok := errors.AsType[*adminapi.FieldError](err); ok {
			je.Field = fe.Field
		}
		enc.Encode(je)
		return
	}
	fmt.Fprintf(w, "%s: %s\n", path, operatorMessage(err))
	var ue *usageErr
	if errors.As(err, &ue) {
		fmt.Fprintf(w, "Run `%s --help` for usage.\n", path)
	}
}

// jsonRequested reports whether cmd has a boolean --json flag (the admin
// verbs, config validate, conformance, version) that the command line
// set. It also looks at args, because a bad flag may have stopped the
// parsing before --json.
func jsonRequested(cmd *cobra.Command, args []string) bool {
	cmd.InheritedFlags() // merges the parents' persistent flags into Flags
	f := cmd.Flags().Lookup("json")
	if f == nil || f.Value.Type() != "bool" {
		return false
	}
	if f.Changed {
		return f.Value.String() == "true"
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}

// sentinelWording is how a message shows a sentinel error's text: the
// sentinel's words without its package prefix ("metadata: ", "admin: ",
// "migrate: ", ...),
// or nothing for a sentinel whose words only classify the sentence that
// follows them ("metadata: invalid argument: member 3 is the leader" is
// "member 3 is the leader"; the --json error's code keeps the class).
// moreSentinels are the sentinels of the verbs registered from other
// packages (RegisterSentinels).
var moreSentinels []error

// RegisterSentinels adds sentinel errors whose package prefix messages
// leave out (operatorMessage); call it from an init function.
func RegisterSentinels(errs ...error) { moreSentinels = append(moreSentinels, errs...) }

var sentinelWording = sync.OnceValue(func() *strings.Replacer {
	var pairs []string
	// A pattern earlier in the list wins where two match at one place, so
	// each sentinel's "text: " comes before its bare text.
	pairs = append(pairs, core.ErrInvalidArgument.Error()+": ", "", "metadata: transaction op", "transaction op")
	for _, err := range append(append(append([]error(nil), core.Sentinels...), adminapi.ErrInvalidCoordinator,
		adminapi.ErrUnimplemented, adminapi.ErrUnauthenticated, adminapi.ErrPermissionDenied,
		adminclient.ErrOutcomeUnknown, catalog.ErrBadRecord, catalog.ErrDuplicateRequest,
		migrate.ErrBadFile, migrate.ErrNotEmpty, migrate.ErrMigrationInProgress), moreSentinels...) {
		_, words, _ := strings.Cut(err.Error(), ": ")
		pairs = append(pairs, err.Error(), words)
	}
	return strings.NewReplacer(pairs...)
})

// operatorMessage is err's message as an operator reads it: the internal
// prefixes of the sentinel errors it carries, at any depth of the text
// (the server's message is the text of its error chain), are left out.
func operatorMessage(err error) string {
	return sentinelWording().Replace(err.Error())
}
