//go:build tools

// Package tools pins the Consul server the e2e tests run (v1.14.11, the
// last open-source line). Build it with `make servers`.
package tools

import _ "github.com/hashicorp/consul"
