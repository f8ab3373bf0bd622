package coordinator

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/metaplane/metaplane/adminapi"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	adminv1 "github.com/metaplane/metaplane/proto/metaplane/admin/v1"
)

// AdminServiceName is the gRPC health service name that is SERVING only on
// the leader coordinator.
var AdminServiceName = adminv1.AdminService_ServiceDesc.ServiceName

// health is the coordinator's grpc.health.v1 service (grpc-go's own
// implementation): the overall service "" is SERVING while the coordinator
// has a backend client open (NOT_SERVING before the first is open, while
// the plugin is being restarted, and once Serve has returned); the admin
// service's name is SERVING only while this coordinator serves as leader.
type healthState struct {
	srv *health.Server
}

func newHealth() *healthState {
	h := &healthState{srv: health.NewServer()}
	h.srv.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	h.srv.SetServingStatus(AdminServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	return h
}

func servingStatus(b bool) healthpb.HealthCheckResponse_ServingStatus {
	if b {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

func (h *healthState) setBackend(open bool) { h.srv.SetServingStatus("", servingStatus(open)) }
func (h *healthState) setLeader(leader bool) {
	h.srv.SetServingStatus(AdminServiceName, servingStatus(leader))
}

// shutdown makes every service NOT_SERVING for good.
func (h *healthState) shutdown() { h.srv.Shutdown() }

// HealthzHandler is /healthz: 200 "ok" while the overall health service is
// SERVING (a backend client is open), else 503 with the reason.
func (s *Server) HealthzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !s.backendOpen.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not serving: no metadata backend client is open")
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// ReadyzHandler is /readyz: 200 when this coordinator serves as leader
// ("leader") or its backend names another leader now ("standby; leader
// <id> at <host:port>": the backend's Leader, bounded by one second, which
// on Raft is a linearizable read and so needs a quorum), else 503 ("no
// leader known"). A standby is ready because it answers every call with
// the leader's address.
func (s *Server) ReadyzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		switch {
		case !s.backendOpen.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: no metadata backend client is open")
		case s.IsLeader():
			fmt.Fprintln(w, "leader")
		default:
			ref := s.backend.Load()
			ctx, cancel := context.WithTimeout(r.Context(), time.Second)
			li, err := ref.b.Leader(ctx)
			cancel()
			if err != nil || li.ID == "" || li.ID == s.id {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, "not ready: no leader known")
				return
			}
			fmt.Fprintf(w, "standby; leader %s at %s\n", li.ID, adminapi.HostPort(li.Address))
		}
	})
}
