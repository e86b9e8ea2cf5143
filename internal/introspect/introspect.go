// Package introspect serves what generic gRPC tools ask a server before
// anything else: gRPC server reflection (v1 and v1alpha), so grpcurl,
// `buf curl` and Postman list and call the API without the .proto files,
// and the standard gRPC health check (grpc.health.v1), so load balancers
// and Kubernetes' gRPC probes read the same health as /healthz.
package introspect

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/rivora/rivora/internal/auth"
	"github.com/rivora/rivora/internal/bounds"
)

// Handle registers reflection and health on mux for services, the
// fully-qualified names of the rivora.v1 services this process serves.
//
// Reflection (of services and of the health service) is behind the auth
// interceptor (auth.Policies: any valid token), as it describes the whole
// API. Health is open to all, like
// /healthz: a probe carries no token. It answers SERVING while healthy
// returns nil, NOT_SERVING otherwise, for the whole process ("") and for
// each of services; any other name is NotFound.
func Handle(mux *http.ServeMux, keys *auth.Keys, healthy func() error, services ...string) {
	services = slices.Compact(slices.Sorted(slices.Values(services)))
	reflector := grpcreflect.NewStaticReflector(append(services, grpchealth.HealthV1ServiceName)...)
	authorized := []connect.HandlerOption{
		connect.WithInterceptors(auth.NewInterceptor(keys), bounds.Interceptor()),
		bounds.ReadMax(bounds.DefaultMessage),
	}
	// Behind the door (auth.Door), which lets the health check through.
	handle := func(path string, h http.Handler) {
		mux.Handle(path, auth.Door(keys, nil, bounds.Handler(bounds.DefaultMessage, h)))
	}
	handle(grpcreflect.NewHandlerV1(reflector, authorized...))
	handle(grpcreflect.NewHandlerV1Alpha(reflector, authorized...))
	handle(grpchealth.NewHandler(&checker{healthy: healthy, services: services}, bounds.ReadMax(bounds.DefaultMessage)))
}

// checker answers grpc.health.v1.Health/Check.
type checker struct {
	healthy  func() error
	services []string
}

func (c *checker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && !slices.Contains(c.services, req.Service) {
		// Not naming the services: health is open, reflection is not.
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("service %q is not served here", req.Service))
	}
	if c.healthy() != nil {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}
