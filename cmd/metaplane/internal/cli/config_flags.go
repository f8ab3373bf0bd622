package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/metaplane/metaplane/config"
	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/plugins"
)

// ConfigFlags are the configuration flags every verb that loads the
// configuration shares (coordinator, config validate, ...): --config FILE,
// repeated -D key=value (long form --define), and --no-env. Register them
// with AddConfigFlags, parse the flags, then call LoadOptions.
type ConfigFlags struct {
	// File is --config; when it was not given, LoadOptions uses
	// $METAPLANE_CONFIG (unless --no-env).
	File string
	// Overrides are the -D settings, in order.
	Overrides []string
	// NoEnv is --no-env: ignore METAPLANE_* variables.
	NoEnv bool

	fileSet bool
}

// AddConfigFlags registers --config, -D (--define) and --no-env on fs (a
// command's Flags, or the PersistentFlags of a group whose verbs share
// them).
func AddConfigFlags(fs *pflag.FlagSet) *ConfigFlags {
	c := &ConfigFlags{}
	fs.Func("config", "the YAML configuration `FILE` (default: $METAPLANE_CONFIG, else none: defaults only)", func(s string) error {
		if s == "" {
			return fmt.Errorf("--config needs a FILE")
		}
		c.File, c.fileSet = s, true
		return nil
	})
	fs.FuncP("define", "D", "set a configuration key, `key=value` (repeatable; a later one wins)", func(s string) error {
		if _, _, err := config.ParseOverride(s); err != nil {
			return err
		}
		c.Overrides = append(c.Overrides, s)
		return nil
	})
	fs.BoolVar(&c.NoEnv, "no-env", false, "ignore METAPLANE_* environment variables")
	fs.SetAnnotation("config", cobra.BashCompFilenameExt, []string{"yaml", "yml"})
	return c
}

// LoadOptions returns the config.LoadOptions the flags describe: the file,
// the process environment (unless --no-env), the overrides, and the
// discovery of third-party backend plugins in metadata.backend.plugin.dir
// (so a plugin's selector key, say etcd.endpoints, is a known key that
// selects it). The caller may add ExtraBackends and Observer.
func (c *ConfigFlags) LoadOptions() config.LoadOptions {
	opts := config.LoadOptions{
		File:             c.File,
		Overrides:        append([]string(nil), c.Overrides...),
		DiscoverBackends: discoverThirdParty,
	}
	if !c.NoEnv {
		opts.Env = os.Environ()
		if !c.fileSet {
			opts.File = os.Getenv("METAPLANE_CONFIG")
		}
	}
	return opts
}

// discoverThirdParty finds the third-party backend plugins in dir for
// config.LoadOptions.DiscoverBackends, bounded so that a hung plugin cannot
// hang a configuration load.
func discoverThirdParty(dir string) ([]core.BackendDescriptor, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return plugins.DiscoverThirdParty(ctx, dir)
}
