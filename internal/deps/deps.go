// Package deps pins the project's third-party modules in go.mod while the
// packages that use them are being written. It is removed once every module
// is imported by real code.
package deps

import (
	_ "github.com/anishathalye/porcupine"
	_ "github.com/cockroachdb/pebble/v2"
	_ "github.com/go-viper/mapstructure/v2"
	_ "github.com/go-zookeeper/zk"
	_ "github.com/google/uuid"
	_ "github.com/hashicorp/go-plugin"
	_ "github.com/knadh/koanf/parsers/yaml"
	_ "github.com/knadh/koanf/providers/env/v2"
	_ "github.com/knadh/koanf/providers/file"
	_ "github.com/knadh/koanf/providers/confmap"
	_ "github.com/knadh/koanf/v2"
	_ "github.com/lni/dragonboat/v4"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "go.uber.org/goleak"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"
)
