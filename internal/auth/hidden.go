package auth

import (
	"fmt"

	"connectrpc.com/connect"
)

// A scoped publisher asking for another customer's item by id gets the
// answer an absent id gets, not PermissionDenied: a refusal would tell it
// that the id exists (and, naming the owner, whose it is). So the
// handlers' "absent" answers and the policies' "not yours" answers are
// built here, once, and cannot drift apart.

// EventNotFound is GetEvent's answer for an event id that is absent, or
// that is not one of the caller's customers'.
func EventNotFound(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("event %s not found: never accepted, still moving into its lane, its history expired, or not one of your token's customers'", id))
}

// DeadLetterNotFound is GetDeadLetter's answer for an event id with no
// dead letter in the archive, or whose dead letter is not one of the
// caller's customers'.
func DeadLetterNotFound(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("no dead letter %q in the archive, or not one of your token's customers' (still pending or delivered? see `rivoractl events get %s`)", id, id))
}
