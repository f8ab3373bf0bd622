package catalog_test

import (
	"context"
	"testing"

	"github.com/metaplane/metaplane/catalog"
)

// TestACLWildcardAndACLsOf: the wildcard name "*" is a valid DATABASE and
// TABLE resource; ACLsOf reads several resources in order, nil where a
// resource has none.
func TestACLWildcardAndACLsOf(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	e := catalog.ACLEntry{PrincipalType: "USER", PrincipalName: "*", PermissionType: "DENY", Host: "*", Operation: "ALTER"}
	for _, typ := range []string{"DATABASE", "TABLE"} {
		if _, err := f.cat.AddACLs(ctx, catalog.ResourceKey{Type: typ, Name: catalog.WildcardResource}, []catalog.ACLEntry{e}); err != nil {
			t.Fatalf("%s *: %v", typ, err)
		}
	}
	if _, err := f.cat.AddACLs(ctx, catalog.ResourceKey{Type: "TABLE", Name: "db.*"}, []catalog.ACLEntry{e}); err == nil {
		t.Error("TABLE db.* accepted: only the whole name * is a wildcard")
	}
	got, err := f.cat.ACLsOf(ctx, []catalog.ResourceKey{{Type: "TABLE", Name: "*"}, {Type: "TABLE", Name: "db.t"}, {Type: "DATABASE", Name: "*"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(got[0]) != 1 || got[0][0] != e || got[1] != nil || len(got[2]) != 1 {
		t.Fatalf("ACLsOf = %v", got)
	}
}
