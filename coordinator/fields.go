package coordinator

import (
	"errors"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/catalog"
)

// fieldMap turns the field a catalog refusal names (relative to the object
// it checked: "bucket_count", "operation", "database") into the request
// field of one RPC ("descriptor.bucket_count", "acls.operation", "name").
// Names absent from rename get prefix; "" keeps the catalog's name.
type fieldMap struct {
	prefix string
	rename map[string]string
}

// Per RPC: where the catalog's fields sit in the request.
var (
	databaseFields  = fieldMap{rename: map[string]string{"database": "name"}}
	tableFields     = fieldMap{prefix: "descriptor.", rename: map[string]string{"database": "database", "table": "table"}}
	partitionFields = fieldMap{rename: map[string]string{}}
	aclAddFields    = fieldMap{prefix: "acls.", rename: map[string]string{"resource_type": "resource_type", "resource_name": "resource_name", "acls": "acls", "": "acls"}}
	aclFilterFields = fieldMap{prefix: "filter.", rename: map[string]string{"resource_type": "resource_type", "resource_name": "resource_name", "": "filter"}}
	plainFields     = fieldMap{rename: map[string]string{}}
)

func (m fieldMap) field(catalogField string) string {
	if f, ok := m.rename[catalogField]; ok {
		return f
	}
	if catalogField == "" {
		return ""
	}
	return m.prefix + catalogField
}

// withField wraps a catalog refusal that names its field in an
// adminapi.FieldError naming the request field, so that the answer's
// ErrorDetail carries it. Other errors pass unchanged.
func withField(err error, m fieldMap) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*adminapi.FieldError](err); ok {
		return err
	}
	ae, ok := errors.AsType[*catalog.ArgumentError](err)
	if !ok {
		return err
	}
	if f := m.field(ae.Field); f != "" {
		return &adminapi.FieldError{Field: f, Err: err}
	}
	return err
}
