// Package config is metaplane's configuration: the typed Config with every
// key and its default (config.go), loading from a YAML file, the
// environment and -D overrides with koanf (load.go, env.go), the strict
// decode of values and its inverse, Flatten (decode.go), the key registry
// (registry.go), validation that collects every problem and does no file
// I/O (validate.go; CheckFiles is the separate file step), and the
// exclusive backend selector with the built-in backends' descriptors as
// data (selector.go).
//
// The host (cmd/metaplane, the coordinator) loads the configuration here
// and hands a backend the flat settings (Flatten); a backend parses its own
// keys with settings and never imports this package.
package config
