// Package reserved names what Rivora keeps for itself among the names
// users choose: the control plane refuses them to users (controlplane),
// and the agents' access rules let only the cell use them (internal/auth).
package reserved

// OperatorDestination is the destination operator notices are delivered
// to (controlplane/notices): its receiver trusts what arrives signed with
// the operator webhook's secret, so only the control plane, with the cell
// token, publishes to it, and no user can create, change or delete it.
const OperatorDestination = "rivora-operator"
