package auth

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/rivora/rivora/proto/rivora/v1" // registers the services
)

// Every RPC of every rivora service has a rule, and every rule names an
// RPC that exists: a new RPC cannot ship without a policy.
func TestEveryRPCHasAPolicy(t *testing.T) {
	seen := map[string]bool{}
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if fd.Package() != "rivora.v1" {
			return true
		}
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			for j := range sd.Methods().Len() {
				proc := "/" + string(sd.FullName()) + "/" + string(sd.Methods().Get(j).Name())
				seen[proc] = true
				if _, ok := Policies[proc]; !ok {
					t.Errorf("%s has no rule in auth.Policies", proc)
				}
			}
		}
		return true
	})
	if len(seen) < 30 {
		t.Fatalf("found only %d RPCs: the registry walk is broken", len(seen))
	}
	// The reflection services' descriptors are grpcreflect's own, not in
	// the global registry.
	seen[reflectV1], seen[reflectV1Alpha] = true, true
	for proc, rule := range Policies {
		if !seen[proc] {
			t.Errorf("auth.Policies names %s, which no service has", proc)
		}
		if rule.Cell == (len(rule.Roles) > 0) {
			t.Errorf("%s: a rule is either the cell's or some roles'", proc)
		}
		if strings.HasPrefix(proc, "/rivora.v1.AgentService/") || strings.HasPrefix(proc, "/rivora.v1.PartitionService/") {
			if !rule.Cell {
				t.Errorf("%s is a cell service but open to API tokens", proc)
			}
		}
	}
}
