package plugins

import (
	"fmt"

	"github.com/metaplane/metaplane/core"
)

// configFromFlat turns the flat configuration the host sent (Start) into
// the typed Config the provider starts from. Errors wrap
// core.ErrInvalidArgument and keep the loader's message, which names every
// key at fault.
func configFromFlat(m map[string]string) (*core.Config, error) {
	cfg, err := core.ConfigFromFlat(m)
	if err != nil {
		return nil, fmt.Errorf("%w: plugin configuration: %v", core.ErrInvalidArgument, err)
	}
	return cfg, nil
}
