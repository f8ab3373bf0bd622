package coordinator

import (
	"fmt"
	"sort"

	"github.com/metaplane/metaplane/adminapi"

	"github.com/metaplane/metaplane/core"
)

// The admin API's lists page (ListDatabases, ListTables, ListPartitions;
// ListBuckets has its own token): an answer holds at most page_size
// items, and its next_page_token (the last item's name) asks for the
// items after it. A request without a page size is answered whole up to
// maxUnpaged items, and refused beyond: no answer grows with the catalog.
const (
	maxPageSize = 10000
	maxUnpaged  = 10000
)

// pageOf returns the items of sorted (in name order) after token, at most
// size of them (0: all, up to maxUnpaged), and the next page's token.
// Errors: INVALID_ARGUMENT (a size out of range, naming field), TOO_LARGE
// (no size and more than maxUnpaged items).
func pageOf[T any](sorted []T, name func(T) string, size int32, token, what string) ([]T, string, error) {
	if size < 0 || size > maxPageSize {
		return nil, "", &adminapi.FieldError{Field: "page_size",
			Err: fmt.Errorf("%w: page size %d is out of range: want 1 to %d (0: the whole list, up to %d)", core.ErrInvalidArgument, size, maxPageSize, maxUnpaged)}
	}
	from := 0
	if token != "" {
		from = sort.Search(len(sorted), func(i int) bool { return name(sorted[i]) > token })
	}
	rest := sorted[from:]
	if size == 0 {
		if len(rest) > maxUnpaged {
			return nil, "", fmt.Errorf("%w: %d %s are more than one answer holds (%d): ask for pages (page_size 1 to %d)",
				core.ErrTooLarge, len(rest), what, maxUnpaged, maxPageSize)
		}
		return rest, "", nil
	}
	if len(rest) <= int(size) {
		return rest, "", nil
	}
	page := rest[:size]
	return page, name(page[len(page)-1]), nil
}

func self(s string) string { return s }
