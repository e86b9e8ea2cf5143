package auth

import (
	"context"
	"slices"
	"testing"

	rivorav1 "github.com/rivora/rivora/proto/rivora/v1"
)

// A customer token is told which ledgers were not read, not which agent
// holds them nor its error (lifecycle's raw trouble text); an operator
// is told everything.
func TestUnreadLedgersForACustomerNameNoAgent(t *testing.T) {
	unread := []*rivorav1.UnreadLedger{
		{Agent: "agent-b", Partitions: []uint32{4, 2}, Reason: "its owner did not answer: dial tcp 10.0.0.7:4222: i/o timeout"},
		{Agent: "agent-c", Partitions: []uint32{2, 7}, Reason: "opening it"},
	}
	customer := WithPrincipal(context.Background(), &Principal{Role: rivorav1.Role_ROLE_CUSTOMER, Customers: []string{"beta"}})
	got := UnreadLedgersFor(customer, unread)
	if len(got) != 1 || got[0].GetAgent() != "" || got[0].GetReason() != hiddenUnreadReason || !slices.Equal(got[0].GetPartitions(), []uint32{2, 4, 7}) {
		t.Errorf("a customer token told %v; want partitions 2, 4, 7 with the generic reason and no agent", got)
	}
	operator := WithPrincipal(context.Background(), &Principal{Role: rivorav1.Role_ROLE_OPERATOR})
	if got := UnreadLedgersFor(operator, unread); len(got) != 2 || got[0].GetAgent() != "agent-b" {
		t.Errorf("an operator told %v; want every agent and reason", got)
	}
}

// A customer token is told that the archive could not be read, not the
// archive's error (its endpoint, bucket, addresses); an operator is.
func TestArchiveErrorForACustomerIsGeneric(t *testing.T) {
	why := "list archive deadletter/: dial tcp 10.0.0.9:9000: connect: connection refused"
	customer := WithPrincipal(context.Background(), &Principal{Role: rivorav1.Role_ROLE_CUSTOMER, Customers: []string{"beta"}})
	if got := ArchiveErrorFor(customer, why); got != hiddenArchiveError {
		t.Errorf("a customer token told %q; want %q", got, hiddenArchiveError)
	}
	if got := ArchiveErrorFor(customer, ""); got != "" {
		t.Errorf("a customer token told %q of an archive that was read; want nothing", got)
	}
	operator := WithPrincipal(context.Background(), &Principal{Role: rivorav1.Role_ROLE_OPERATOR})
	if got := ArchiveErrorFor(operator, why); got != why {
		t.Errorf("an operator told %q; want the archive's error", got)
	}
}
