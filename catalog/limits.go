package catalog

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"

	"github.com/metaplane/metaplane/core"
)

// The limits the catalog checks before it does any work. The configurable
// ones have their defaults here; the coordinator passes the configured
// values in Options.
const (
	// DefaultMaxBucketNum is the default of max.bucket.num: the most
	// buckets one table (or one partition) may have.
	DefaultMaxBucketNum = 20000
	// DefaultMaxPartitionNum is the default of max.partition.num: the most
	// partitions one partitioned table may have.
	DefaultMaxPartitionNum = 1000
	// MaxAllocateIDs is the most ids one AllocateIDs call reserves.
	MaxAllocateIDs = 1_000_000
	// MaxDecimalPrecision is the largest precision of DECIMAL(p, s).
	MaxDecimalPrecision = 38
	// MaxTimePrecision is the largest fractional-second precision of TIME,
	// TIMESTAMP and TIMESTAMP_LTZ.
	MaxTimePrecision = 9
)

// Server tags the original knows (/tabletservers/server_tags).
const (
	TagPermanentOffline = 0
	TagTemporaryOffline = 1
)

// The ACL enumerations: every stored entry uses one of these, upper case.
var (
	ACLResourceTypes  = []string{"CLUSTER", "DATABASE", "TABLE"}
	ACLOperations     = []string{"ALL", "READ", "WRITE", "CREATE", "DROP", "ALTER", "DESCRIBE"}
	ACLPermissions    = []string{"ALLOW", "DENY"}
	ACLPrincipalTypes = []string{"USER"}
)

// invalidField is invalid naming the request field at fault.
func invalidField(field, format string, args ...any) error {
	return &ArgumentError{Msg: fmt.Sprintf(format, args...), Field: field}
}

// validateColumnName checks a column name: not empty, no control
// characters, no leading or trailing space.
func validateColumnName(table string, i int, name string) error {
	if name == "" {
		return invalidField("columns", "table %s: column %d has no name", table, i)
	}
	if strings.TrimSpace(name) != name {
		return invalidField("columns", "table %s: column name %q has leading or trailing spaces", table, name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return invalidField("columns", "table %s: column name %q contains a control character", table, name)
		}
	}
	return nil
}

// ValidateType checks t's parameters against the ranges the original
// allows: CHAR and BINARY length at least 1, DECIMAL precision 1 to 38 and
// scale 0 to the precision, TIME/TIMESTAMP/TIMESTAMP_LTZ precision 0 to 9;
// nested types recursively. The error wraps core.ErrInvalidArgument.
func ValidateType(t DataType) error {
	p := func(v *int32) int64 {
		if v == nil {
			return -1
		}
		return int64(*v)
	}
	switch t.Type {
	case "CHAR", "BINARY":
		if n := p(t.Length); t.Length != nil && n < 1 {
			return invalid("%s length %d is out of range: want 1 to %d", t.Type, n, math.MaxInt32)
		}
	case "DECIMAL":
		if t.Precision != nil && (*t.Precision < 1 || *t.Precision > MaxDecimalPrecision) {
			return invalid("DECIMAL precision %d is out of range: want 1 to %d", *t.Precision, MaxDecimalPrecision)
		}
		if t.Scale != nil && (*t.Scale < 0 || (t.Precision != nil && *t.Scale > *t.Precision)) {
			return invalid("DECIMAL scale %d is out of range: want 0 to the precision, %d", *t.Scale, p(t.Precision))
		}
	case "TIME_WITHOUT_TIME_ZONE", "TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE":
		if t.Precision != nil && (*t.Precision < 0 || *t.Precision > MaxTimePrecision) {
			return invalid("%s precision %d is out of range: want 0 to %d", t.Type, *t.Precision, MaxTimePrecision)
		}
	}
	for _, sub := range []*DataType{t.ElementType, t.KeyType, t.ValueType} {
		if sub != nil {
			if err := ValidateType(*sub); err != nil {
				return err
			}
		}
	}
	for _, f := range t.Fields {
		if err := ValidateType(f.Type); err != nil {
			return fmt.Errorf("field %q: %w", f.Name, err)
		}
	}
	return nil
}

// oneOf checks that v is one of the allowed values, naming field.
func oneOf(field, what, v string, allowed []string) error {
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return invalidField(field, "%s %q is not one of %s", what, v, strings.Join(allowed, ", "))
}

// TooLargeError says a write was refused by the backend's value-size
// limit; it names the user's object, not the backend's path.
// errors.Is(err, core.ErrTooLarge) holds for it.
type TooLargeError struct {
	Kind   string // KindTable, KindPartition, ...
	Name   string // "db.t"
	Detail string // what made it large: "20000 buckets"
}

func (e *TooLargeError) Error() string {
	msg := strings.TrimSpace(e.Kind+" "+e.Name) + " is too large for the metadata backend"
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg + ": nothing was written"
}

// Unwrap makes errors.Is(err, core.ErrTooLarge) true.
func (e *TooLargeError) Unwrap() error { return core.ErrTooLarge }

// tooLarge replaces a backend's ErrTooLarge (whose message names an
// internal path) by a TooLargeError naming the object; other errors pass.
func tooLarge(err error, kind, name, detail string) error {
	if errors.Is(err, core.ErrTooLarge) {
		return &TooLargeError{Kind: kind, Name: name, Detail: detail}
	}
	return err
}

// CounterExhaustedError says an id counter cannot hand out the ids asked
// for without passing the largest int64: nothing was reserved, and the
// counter never wraps. errors.Is(err, core.ErrTooLarge) holds for it (the
// admin API's RESOURCE_EXHAUSTED).
type CounterExhaustedError struct {
	Counter string // "table", "partition", "writer"
	N       int64  // the ids asked for
}

func (e *CounterExhaustedError) Error() string {
	return fmt.Sprintf("id counter %s is exhausted: %d more ids would pass the largest id, %d; nothing was reserved",
		e.Counter, e.N, int64(math.MaxInt64))
}

// Unwrap makes errors.Is(err, core.ErrTooLarge) true.
func (e *CounterExhaustedError) Unwrap() error { return core.ErrTooLarge }
