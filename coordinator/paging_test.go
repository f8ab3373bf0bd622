package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/core"
)

func TestPageOf(t *testing.T) {
	items := make([]string, 25)
	for i := range items {
		items[i] = fmt.Sprintf("t%02d", i)
	}
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("more than 3 pages of 10 for 25 items")
		}
		page, next, err := pageOf(items, self, 10, token, "tables")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if next == "" {
			break
		}
		token = next
	}
	if !slices.Equal(got, items) {
		t.Fatalf("pages of 10: %v", got)
	}
	// A token names the last item seen: items after it, even when it is
	// gone since.
	if page, _, _ := pageOf(items, self, 3, "t05x", "tables"); !slices.Equal(page, []string{"t06", "t07", "t08"}) {
		t.Fatalf("after a removed item: %v", page)
	}
	if page, next, err := pageOf(items, self, 0, "", "tables"); err != nil || len(page) != 25 || next != "" {
		t.Fatalf("unpaged: %d items, next %q, %v", len(page), next, err)
	}
	many := make([]string, maxUnpaged+1)
	for i := range many {
		many[i] = fmt.Sprintf("t%06d", i)
	}
	if _, _, err := pageOf(many, self, 0, "", "tables"); !errors.Is(adminapi.FromStatus(err), core.ErrTooLarge) {
		t.Fatalf("unpaged answer past %d items: %v, want TOO_LARGE", maxUnpaged, err)
	}
	for _, size := range []int32{-1, maxPageSize + 1} {
		if _, _, err := pageOf(items, self, size, "", "tables"); !errors.Is(adminapi.FromStatus(err), core.ErrInvalidArgument) {
			t.Fatalf("page size %d: %v, want INVALID_ARGUMENT", size, err)
		}
	}
}
