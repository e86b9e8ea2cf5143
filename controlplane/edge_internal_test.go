package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A follower refuses every admin and agent procedure, Unavailable and
// naming the leader, before any handler runs. The procedures come from
// the services' descriptors, so a new RPC cannot skip the gate unnoticed.
func TestFollowerRefusesEveryProcedure(t *testing.T) {
	cp, err := New(Config{StateDir: t.TempDir(), Keys: testKeys(t)}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	const leader = "http://leader.invalid:7300"
	mux := http.NewServeMux()
	cp.handle(mux, func() error { return errorf(ErrUnavailable, "not the leader; the leader is %s", leader) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	services := []protoreflect.ServiceDescriptor{
		rivorav1.File_rivora_v1_admin_proto.Services().ByName("AdminService"),
		rivorav1.File_rivora_v1_agent_proto.Services().ByName("AgentService"),
		rivorav1.File_rivora_v1_tokens_proto.Services().ByName("TokenService"),
		rivorav1.File_rivora_v1_edges_proto.Services().ByName("EdgeService"),
	}
	procedures := 0
	for _, svc := range services {
		methods := svc.Methods()
		for i := range methods.Len() {
			m := methods.Get(i)
			procedure := "/" + string(svc.FullName()) + "/" + string(m.Name())
			err := callEmpty(t, srv, procedure, m)
			if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "the leader is "+leader) {
				t.Errorf("%s on a follower: %v (code %v), want Unavailable naming the leader", procedure, err, connect.CodeOf(err))
			}
			procedures++
		}
	}
	if procedures < 23 {
		t.Fatalf("checked %d procedures; the admin, agent, token and edge services have at least 23", procedures)
	}
	if _, dests := cp.store.Snapshot(); len(dests) != 0 {
		t.Fatalf("a refused call changed the state: %v", dests)
	}
}

// callEmpty calls procedure with an empty request (which every request
// message decodes from) and returns its error.
func callEmpty(t *testing.T, srv *httptest.Server, procedure string, m protoreflect.MethodDescriptor) error {
	t.Helper()
	client := connect.NewClient[emptypb.Empty, emptypb.Empty](srv.Client(), srv.URL+procedure)
	ctx := context.Background()
	switch {
	case m.IsStreamingClient():
		t.Fatalf("%s streams from the client: teach this test to call it", procedure)
		return nil
	case m.IsStreamingServer():
		stream, err := client.CallServerStream(ctx, connect.NewRequest(&emptypb.Empty{}))
		if err != nil {
			return err
		}
		defer stream.Close()
		for stream.Receive() {
			t.Errorf("%s sent a message on a follower", procedure)
		}
		return stream.Err()
	default:
		_, err := client.CallUnary(ctx, connect.NewRequest(&emptypb.Empty{}))
		return err
	}
}

// asConnect is the one place domain errors become Connect codes; the
// message stays what the domain said.
func TestAsConnect(t *testing.T) {
	cases := []struct {
		name string
		err  error
		code connect.Code
	}{
		{"invalid", errorf(ErrInvalid, "url %q must be absolute", "x"), connect.CodeInvalidArgument},
		{"not found", notFound("orders"), connect.CodeNotFound},
		{"exists", errorf(ErrExists, "destination %q already exists", "orders"), connect.CodeAlreadyExists},
		{"precondition", errorf(ErrPrecondition, "destination %q is not paused", "orders"), connect.CodeFailedPrecondition},
		{"unavailable", errNoAgents, connect.CodeUnavailable},
		{"wrapped kind", fmt.Errorf("address: %w", errorf(ErrInvalid, "bad")), connect.CodeInvalidArgument},
		{"outermost kind wins", tag(ErrUnavailable, fmt.Errorf("agent a: %w", notFound("x"))), connect.CodeUnavailable},
		{"conflict", fmt.Errorf("x: %w", ErrConflict), connect.CodeAborted},
		{"fenced write", ErrNotLeader, connect.CodeUnavailable},
		{"consul down", &consulError{"read state", errors.New("connection refused")}, connect.CodeUnavailable},
		{"connect error", fmt.Errorf("x: %w", connect.NewError(connect.CodeDeadlineExceeded, errors.New("slow"))), connect.CodeDeadlineExceeded},
		{"anything else", errors.New("disk full"), connect.CodeInternal},
		{"canceled", fmt.Errorf("watch: %w", context.Canceled), connect.CodeCanceled},
	}
	for _, tc := range cases {
		got := asConnect(tc.err)
		if connect.CodeOf(got) != tc.code {
			t.Errorf("%s: %v answers %v, want %v", tc.name, tc.err, connect.CodeOf(got), tc.code)
		}
		var ce *connect.Error
		if tc.name != "connect error" && (!errors.As(got, &ce) || ce.Message() != tc.err.Error()) {
			t.Errorf("%s: message %q, want the domain's %q", tc.name, got, tc.err)
		}
	}
	if asConnect(nil) != nil {
		t.Error("asConnect(nil) is not nil")
	}
	if err := notFound("x"); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalid) {
		t.Errorf("notFound: errors.Is ErrNotFound %v, ErrInvalid %v", errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalid))
	}
}
