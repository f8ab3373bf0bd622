package catalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/metaplane/metaplane/core"
)

// readModifyWrite reads path (linearizably, from the backend), lets modify
// compute the new value (nil data: delete the node), and writes it with the
// version read, plus extra ops, in one fenced transaction; it retries on a
// concurrent change (ErrBadVersion, ErrNodeExists, ErrNotFound on the
// node) up to MaxRetries times.
//
// A value over the backend's size limit fails with a *TooLargeError naming
// what the caller names with kind and name, not path.
func (c *Catalog) readModifyWrite(ctx context.Context, kind, name, path string, modify func(old []byte, found bool) ([]byte, error), extra ...core.Op) (int64, error) {
	for attempt := 0; ; attempt++ {
		n, err := core.Get(ctx, c.b, path)
		found := err == nil
		if err != nil && !errors.Is(err, core.ErrNotFound) {
			return 0, err
		}
		data, err := modify(n.Data, found)
		if err != nil {
			return 0, err
		}
		var op core.Op
		switch {
		case data == nil && !found:
			return 0, nil // nothing to delete
		case data == nil:
			op = core.DeleteOp(path, n.Stat.Version)
		case found:
			op = core.SetOp(path, data, n.Stat.Version)
		default:
			op = core.CreateOp(path, data, core.Persistent).WithParents()
		}
		res, err := c.txn(ctx, append([]core.Op{op}, extra...))
		if err != nil && core.FailedOpIndex(err) == 0 && attempt < c.maxRetries &&
			(errors.Is(err, core.ErrBadVersion) || errors.Is(err, core.ErrNodeExists) || errors.Is(err, core.ErrNotFound)) {
			continue
		}
		if err != nil {
			return 0, tooLarge(err, kind, name, "")
		}
		return res.Revision, nil
	}
}

// WildcardResource is the resource name that stands for every resource of
// its type (the original's and Kafka's literal "*").
const WildcardResource = "*"

// ResourceKey names an ACL resource: a type ("CLUSTER", "DATABASE",
// "TABLE") and a name ("fluss-cluster", "db1", "db1.t1").
type ResourceKey struct {
	Type string
	Name string
}

// validate checks the resource against the enumerations: the type is one
// of ACLResourceTypes; a DATABASE is named by a database name, a TABLE by
// <db>.<table>, the CLUSTER by any valid name ("fluss-cluster"); the name
// WildcardResource ("*") means every resource of the type.
func (k ResourceKey) validate() error {
	if err := oneOf("resource_type", "acl resource type", k.Type, ACLResourceTypes); err != nil {
		return err
	}
	if k.Name == WildcardResource {
		return nil
	}
	badName := func(want string) error {
		return invalidField("resource_name", "acl resource name %q is not a valid %s name (%s)", truncate(k.Name), strings.ToLower(k.Type), want)
	}
	switch k.Type {
	case "DATABASE":
		if ValidateName(KindDatabase, k.Name) != nil {
			return badName("1 to 200 letters, digits, '_' and '-'")
		}
	case "TABLE":
		db, t, ok := strings.Cut(k.Name, ".")
		if !ok || ValidateName(KindDatabase, db) != nil || ValidateName(KindTable, t) != nil {
			return badName("<db>.<table>, each 1 to 200 letters, digits, '_' and '-'")
		}
	default:
		if k.Name == "" || len(k.Name) > maxNameLength || strings.Contains(k.Name, "/") || core.ValidatePath("/"+k.Name) != nil {
			return badName("1 to 200 characters, no '/', no control characters")
		}
	}
	return nil
}

// validateACLEntry checks an entry's fields against the enumerations. In a
// filter (remove-acl) an empty field matches everything; in an entry to add
// the principal, the permission and the operation are required.
func validateACLEntry(e ACLEntry, filter bool) error {
	if !filter && (e.PrincipalType == "" || e.PrincipalName == "" || e.PermissionType == "" || e.Operation == "") {
		return invalidField("", "acl entry: principal type, principal name, permission type and operation are required")
	}
	for _, f := range []struct {
		field, what, v string
		allowed        []string
	}{
		{"principal_type", "acl principal type", e.PrincipalType, ACLPrincipalTypes},
		{"permission_type", "acl permission", e.PermissionType, ACLPermissions},
		{"operation", "acl operation", e.Operation, ACLOperations},
	} {
		if f.v == "" && filter {
			continue
		}
		if err := oneOf(f.field, f.what, f.v, f.allowed); err != nil {
			return err
		}
	}
	if len(e.PrincipalName) > maxNameLength || strings.ContainsAny(e.PrincipalName, "\x00\n\r") {
		return invalidField("principal_name", "acl principal name %q is not valid: at most %d characters, no control characters", truncate(e.PrincipalName), maxNameLength)
	}
	if len(e.Host) > maxNameLength || strings.ContainsAny(e.Host, "\x00\n\r") {
		return invalidField("host", "acl host %q is not valid: at most %d characters, no control characters", truncate(e.Host), maxNameLength)
	}
	return nil
}

// AddACLs adds entries (those not already present) to resource's ACL in
// one fenced, version-checked transaction together with the
// /fluss-acl-changes/acl_changes_ notification node; it is retried on a
// concurrent change. It returns how many entries were new: with none,
// nothing is written and it returns 0. Errors: ErrInvalidArgument, backend
// errors.
func (c *Catalog) AddACLs(ctx context.Context, resource ResourceKey, entries []ACLEntry) (int, error) {
	if err := resource.validate(); err != nil {
		return 0, err
	}
	if len(entries) == 0 {
		return 0, invalidField("acls", "no acl entries given")
	}
	for _, e := range entries {
		if err := validateACLEntry(e, false); err != nil {
			return 0, err
		}
	}
	added := 0
	_, err := c.readModifyWrite(ctx, "acl of", resource.Type+":"+resource.Name, ResourceACLPath(resource.Type, resource.Name), func(old []byte, found bool) ([]byte, error) {
		added = 0
		var cur ResourceACL
		if found {
			var err error
			if cur, err = UnmarshalResourceACL(old); err != nil {
				return nil, err
			}
		}
		for _, e := range entries {
			if e.Host == "" {
				e.Host = "*"
			}
			if !containsACL(cur.ACLs, e) {
				cur.ACLs = append(cur.ACLs, e)
				added++
			}
		}
		if added == 0 {
			return nil, errNothingToDo
		}
		setResult(ctx, func(r *RequestRecord) { r.N = added })
		return cur.Marshal(), nil
	}, aclChangeOp(resource))
	if errors.Is(err, errNothingToDo) {
		return 0, nil
	}
	return added, err
}

// RemoveACLs removes the entries matching filter (empty fields match
// everything) from resource's ACL; a resource left without entries is
// deleted. It returns how many entries it removed: with none matching,
// nothing is written and it returns 0. Errors: ErrInvalidArgument, backend
// errors.
func (c *Catalog) RemoveACLs(ctx context.Context, resource ResourceKey, filter ACLEntry) (int, error) {
	if err := resource.validate(); err != nil {
		return 0, err
	}
	if err := validateACLEntry(filter, true); err != nil {
		return 0, err
	}
	removed := 0
	_, err := c.readModifyWrite(ctx, "acl of", resource.Type+":"+resource.Name, ResourceACLPath(resource.Type, resource.Name), func(old []byte, found bool) ([]byte, error) {
		removed = 0
		if !found {
			return nil, errNothingToDo
		}
		cur, err := UnmarshalResourceACL(old)
		if err != nil {
			return nil, err
		}
		kept := make([]ACLEntry, 0, len(cur.ACLs))
		for _, e := range cur.ACLs {
			if !matchACL(filter, e) {
				kept = append(kept, e)
			}
		}
		removed = len(cur.ACLs) - len(kept)
		if removed == 0 {
			return nil, errNothingToDo
		}
		setResult(ctx, func(r *RequestRecord) { r.N = removed })
		if len(kept) == 0 {
			return nil, nil
		}
		return ResourceACL{ACLs: kept}.Marshal(), nil
	}, aclChangeOp(resource))
	if errors.Is(err, errNothingToDo) {
		return 0, nil
	}
	return removed, err
}

// errNothingToDo ends a readModifyWrite without writing.
var errNothingToDo = errors.New("catalog: nothing to change")

// ResourceACLs is one resource's ACL.
type ResourceACLs struct {
	Resource ResourceKey
	ACLs     []ACLEntry
}

// ListACLs returns the ACLs of every resource (resourceType "" for all
// types), sorted by type and name.
func (c *Catalog) ListACLs(ctx context.Context, resourceType string) ([]ResourceACLs, error) {
	types := []string{resourceType}
	if resourceType == "" {
		var err error
		types, _, err = c.r.Children(ctx, ACLsPath, core.ReadOptions{})
		if errors.Is(err, core.ErrNotFound) {
			return []ResourceACLs{}, nil
		}
		if err != nil {
			return nil, err
		}
	}
	out := []ResourceACLs{}
	for _, t := range types {
		names, _, err := c.r.Children(ctx, ResourceTypePath(t), core.ReadOptions{})
		if errors.Is(err, core.ErrNotFound) || errors.Is(err, core.ErrInvalidPath) {
			continue
		}
		if err != nil {
			return nil, err
		}
		paths := make([]string, len(names))
		for i, n := range names {
			paths[i] = ResourceACLPath(t, n)
		}
		res, err := c.r.GetMany(ctx, paths, core.ReadOptions{})
		if err != nil {
			return nil, err
		}
		for i, r := range res {
			if r.Err != nil {
				continue
			}
			acl, err := UnmarshalResourceACL(r.Node.Data)
			if err != nil {
				return nil, fmt.Errorf("acl %s/%s: %w", t, names[i], err)
			}
			out = append(out, ResourceACLs{Resource: ResourceKey{Type: t, Name: names[i]}, ACLs: acl.ACLs})
		}
	}
	return out, nil
}

func aclChangeOp(resource ResourceKey) core.Op {
	return core.CreateOp(ACLChangePrefix, []byte(resource.Type+":"+resource.Name), core.PersistentSequential).WithParents()
}

func containsACL(list []ACLEntry, e ACLEntry) bool {
	for _, x := range list {
		if x == e {
			return true
		}
	}
	return false
}

func matchACL(f, e ACLEntry) bool {
	m := func(a, b string) bool { return a == "" || a == b }
	return m(f.PrincipalType, e.PrincipalType) && m(f.PrincipalName, e.PrincipalName) &&
		m(f.PermissionType, e.PermissionType) && m(f.Host, e.Host) && m(f.Operation, e.Operation)
}

// ------------------------------------------------------------ dynamic config

// AlterConfigs changes the dynamic server configuration
// (/config/server/global): each key of set is set, each key of remove is
// deleted, in one fenced, version-checked transaction together with a
// /config/changes/config_change_ notification node. Errors:
// ErrInvalidArgument (an empty key), backend errors.
func (c *Catalog) AlterConfigs(ctx context.Context, set map[string]string, remove []string) (int64, error) {
	for k := range set {
		if k == "" {
			return 0, invalid("config key is empty")
		}
	}
	return c.readModifyWrite(ctx, "the dynamic configuration", "", ConfigGlobalPath, func(old []byte, found bool) ([]byte, error) {
		cur := ConfigJSON{Configs: map[string]string{}}
		if found {
			var err error
			if cur, err = UnmarshalConfigJSON(old); err != nil {
				return nil, err
			}
		}
		for k, v := range set {
			cur.Configs[k] = v
		}
		for _, k := range remove {
			delete(cur.Configs, k)
		}
		return cur.Marshal(), nil
	}, core.CreateOp(ConfigChangePrefix, nil, core.PersistentSequential).WithParents())
}

// Configs returns the dynamic server configuration (empty when none).
func (c *Catalog) Configs(ctx context.Context) (map[string]string, error) {
	n, err := core.Get(ctx, c.r, ConfigGlobalPath)
	if errors.Is(err, core.ErrNotFound) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	cfg, err := UnmarshalConfigJSON(n.Data)
	return cfg.Configs, err
}

// --------------------------------------------------------------- server tags

// SetServerTags tags the given tablet servers (tag TagPermanentOffline or
// TagTemporaryOffline) or removes their tags (tag < 0) in
// /tabletservers/server_tags, version-checked and fenced. A tag is set
// only on registered tablet servers (a tag of one that is gone may still
// be removed). Errors: ErrInvalidArgument (no ids, an unknown tag),
// *NotFoundError (a server that is not registered), backend errors.
func (c *Catalog) SetServerTags(ctx context.Context, servers []int32, tag int32) (int64, error) {
	if len(servers) == 0 {
		return 0, invalidField("server_ids", "no tablet server ids given")
	}
	if tag > TagTemporaryOffline {
		return 0, invalidField("tag", "server tag %d is not one of %d (permanent offline), %d (temporary offline)", tag, TagPermanentOffline, TagTemporaryOffline)
	}
	if tag >= 0 {
		registered, err := c.TabletServerIDs(ctx)
		if err != nil {
			return 0, err
		}
		for _, id := range servers {
			if !containsID(registered, id) {
				return 0, notFound(KindTabletServer, strconv.Itoa(int(id)))
			}
		}
	}
	return c.readModifyWrite(ctx, "the server tags", "", ServerTagsPath, func(old []byte, found bool) ([]byte, error) {
		cur := ServerTags{Tags: map[int32]int32{}}
		if found {
			var err error
			if cur, err = UnmarshalServerTags(old); err != nil {
				return nil, err
			}
		}
		for _, id := range servers {
			if tag < 0 {
				delete(cur.Tags, id)
			} else {
				cur.Tags[id] = tag
			}
		}
		return cur.Marshal(), nil
	})
}

// ServerTags returns the tablet servers' tags.
func (c *Catalog) ServerTags(ctx context.Context) (map[int32]int32, error) {
	n, err := core.Get(ctx, c.r, ServerTagsPath)
	if errors.Is(err, core.ErrNotFound) {
		return map[int32]int32{}, nil
	}
	if err != nil {
		return nil, err
	}
	t, err := UnmarshalServerTags(n.Data)
	return t.Tags, err
}

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// ACLsOf returns the entries stored on each of the resources, in order (nil
// for a resource without ACLs), in one batched read. Errors: a malformed
// stored value, backend errors.
func (c *Catalog) ACLsOf(ctx context.Context, resources []ResourceKey) ([][]ACLEntry, error) {
	paths := make([]string, len(resources))
	for i, r := range resources {
		paths[i] = ResourceACLPath(r.Type, r.Name)
	}
	res, err := c.r.GetMany(ctx, paths, core.ReadOptions{})
	if err != nil {
		return nil, err
	}
	out := make([][]ACLEntry, len(resources))
	for i, r := range res {
		if errors.Is(r.Err, core.ErrNotFound) {
			continue
		}
		if r.Err != nil {
			return nil, r.Err
		}
		acl, err := UnmarshalResourceACL(r.Node.Data)
		if err != nil {
			return nil, fmt.Errorf("acl %s/%s: %w", resources[i].Type, resources[i].Name, err)
		}
		out[i] = acl.ACLs
	}
	return out, nil
}
