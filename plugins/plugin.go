package plugins

import (
	"context"
	"math"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/metaplane/metaplane/core"
	"github.com/metaplane/metaplane/internal/protocodec"
	pb "github.com/metaplane/metaplane/proto/metaplane/v1"
)

// Handshake is the go-plugin handshake every metaplane backend plugin and
// host share. The magic cookie never changes: it only tells a plugin binary
// run by hand that it was not started by metaplane. Protocol versions are
// negotiated through the plugin sets (PluginSets), not through it.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "METAPLANE_BACKEND_PLUGIN",
	MagicCookieValue: "5c0f9a7e3d21b84c6e0f2a9d7b1c3e58",
}

// ProtocolVersion is the newest wire protocol version this build speaks
// (package metaplane.v1).
const ProtocolVersion = 1

// PluginName is the name under which a plugin process dispenses its
// backend.
const PluginName = "backend"

// maxMessageSize bounds one gRPC message across the boundary in both
// directions (a Snapshot of a large tree is one message).
const maxMessageSize = math.MaxInt32

// PluginSets returns the versioned plugin sets for a plugin serving p (the
// host passes nil). Version 1 is the metaplane.v1 Backend service.
func PluginSets(p core.Provider) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		1: {PluginName: &GRPCPlugin{Provider: p}},
	}
}

// GRPCPlugin is the go-plugin glue of the metaplane.v1 Backend service. On
// the plugin side Provider is the backend served; on the host side it is
// nil and GRPCClient returns the raw gRPC client.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Provider is the backend the plugin serves; nil on the host side.
	Provider core.Provider

	srv *server
}

// GRPCServer registers the Backend service for the provider.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	p.srv = newServer(p.Provider)
	registerBackend(s, p.srv)
	return nil
}

// GRPCClient returns a pb.BackendClient on conn.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return pb.NewBackendClient(conn), nil
}

// streamWorkers is how many goroutines of the plugin's gRPC server serve
// calls, each kept for many calls: a goroutine per call (gRPC's default)
// grows a fresh stack on every call, which under many concurrent writers
// was about 6% of a Raft leader plugin's CPU. Beyond this many calls at
// once gRPC starts a goroutine per call as before.
const streamWorkers = 64

// grpcServerOptions are the plugin's gRPC server options. Both sides
// encode the Backend service's messages with their generated methods
// (protocodec): the protobuf runtime's reflection was most of the
// encoding's CPU on both sides of a write (docs/plugins.md, "Wire
// encoding"). The wire format is the same, so a host or plugin built
// without it speaks to one built with it.
func grpcServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessageSize),
		grpc.MaxSendMsgSize(maxMessageSize),
		grpc.NumStreamWorkers(streamWorkers),
		grpc.ForceServerCodecV2(protocodec.Codec()),
	}
}

// grpcDialOptions are the host's gRPC dial options.
func grpcDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize), grpc.MaxCallSendMsgSize(maxMessageSize), grpc.ForceCodecV2(protocodec.Codec())),
	}
}
