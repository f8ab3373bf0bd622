package catalog

import (
	"errors"
	"fmt"

	"github.com/metaplane/metaplane/core"
)

// ErrBadRecord is wrapped by every decoding error: a stored value that is
// not a valid record of its kind.
var ErrBadRecord = errors.New("catalog: malformed record")

func formatError(what, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrBadRecord, what, fmt.Sprintf(format, args...))
}

// Kinds of catalog objects named in errors.
const (
	KindDatabase     = "database"
	KindTable        = "table"
	KindPartition    = "partition"
	KindTabletServer = "tablet server"
	KindACL          = "acl"
)

// NotFoundError says a catalog object does not exist. errors.Is(err,
// core.ErrNotFound) holds for it.
type NotFoundError struct {
	Kind string // KindDatabase, KindTable, ...
	Name string // "db1", "db1.orders", "db1.orders/2024"
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %s does not exist", e.Kind, e.Name) }

// Unwrap makes errors.Is(err, core.ErrNotFound) true.
func (e *NotFoundError) Unwrap() error { return core.ErrNotFound }

// ExistsError says a catalog object already exists. errors.Is(err,
// core.ErrNodeExists) holds for it.
type ExistsError struct {
	Kind string
	Name string
}

func (e *ExistsError) Error() string { return fmt.Sprintf("%s %s already exists", e.Kind, e.Name) }

// Unwrap makes errors.Is(err, core.ErrNodeExists) true.
func (e *ExistsError) Unwrap() error { return core.ErrNodeExists }

// NotEmptyError says a catalog object cannot be dropped because it still
// holds others (a database with tables). errors.Is(err, core.ErrNotEmpty)
// holds for it.
type NotEmptyError struct {
	Kind   string
	Name   string
	Detail string // what it still holds: "3 tables"
}

func (e *NotEmptyError) Error() string {
	return fmt.Sprintf("%s %s is not empty: it has %s", e.Kind, e.Name, e.Detail)
}

// Unwrap makes errors.Is(err, core.ErrNotEmpty) true.
func (e *NotEmptyError) Unwrap() error { return core.ErrNotEmpty }

func notFound(kind, name string) error { return &NotFoundError{Kind: kind, Name: name} }
func exists(kind, name string) error   { return &ExistsError{Kind: kind, Name: name} }

// ArgumentError is a refused request: a bad name, type, key or count. The
// message says what was wrong and the limit; errors.Is(err,
// core.ErrInvalidArgument) holds for it.
type ArgumentError struct {
	Msg string
	// Field names what was wrong, as the admin API's request names it
	// relative to the object ("bucket_count", "columns", "operation",
	// "count"); empty when no one field is at fault.
	Field string
}

func (e *ArgumentError) Error() string { return e.Msg }

// Unwrap makes errors.Is(err, core.ErrInvalidArgument) true.
func (e *ArgumentError) Unwrap() error { return core.ErrInvalidArgument }

func invalid(format string, args ...any) error {
	return &ArgumentError{Msg: fmt.Sprintf(format, args...)}
}
