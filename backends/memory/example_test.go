package memory_test

import (
	"context"
	"fmt"

	"github.com/metaplane/metaplane/backends/memory"
	"github.com/metaplane/metaplane/core"
)

// A store with two clients: an ephemeral node of one is visible to the
// other until the first client's session ends.
func Example() {
	ctx := context.Background()
	store := memory.NewStore(memory.StoreOptions{})
	defer store.Close()
	a := store.NewClient(core.ClientOptions{Name: "a"})
	b := store.NewClient(core.ClientOptions{Name: "b"})

	path, _, err := core.Create(ctx, a, "/tabletservers/ids/1", []byte("ts-1"),
		core.CreateOptions{Mode: core.Ephemeral, MakeParents: true})
	if err != nil {
		panic(err)
	}
	n, _ := core.Get(ctx, b, path)
	fmt.Printf("%s = %s\n", n.Path, n.Data)

	a.ExpireSession(ctx)
	_, ok, _ := core.Exists(ctx, b, path)
	fmt.Println("after a's session expired, exists:", ok)
	// Output:
	// /tabletservers/ids/1 = ts-1
	// after a's session expired, exists: false
}
