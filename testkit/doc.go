// Package testkit is the one test kit of Rivora: what the tests of every
// package, the e2e tests and the benchmarks share, and what only they may
// import (internal/floors fails when product code does).
//
//   - testkit/poll: the one poll loop (wait for a condition another
//     goroutine or process makes true).
//   - testkit/syncbuf: the one buffer written by one goroutine (a
//     process's pipes, a logger) while the test reads it.
//   - testkit/partner: the one partner endpoint (verify signatures or not,
//     a per-request answer gate, a delay, record every request or only
//     count).
//   - testkit/cutproxy: a TCP proxy whose link is cut silently (nothing
//     closed, bytes held) and restored, as a broken WAN.
//   - testkit/connectproxy: an HTTP CONNECT proxy that records the
//     targets it tunnels to (egress through a proxy).
//   - testkit/ports: ports for processes a test starts, outside the
//     kernel's ephemeral range (so no connection or port-0 listener takes
//     one before its process binds it).
//   - testkit/rig: the in-process `rivora dev` (control plane and agent)
//     of the agent, control plane and CLI tests; it sits above what it
//     starts.
//   - testkit/ts: the TypeScript kit of the SDK and console tests (start
//     a `rivora dev`, a partner).
//
// Its own test keeps test and benchmark functions short (at most
// maxFuncLines lines), so a test reads as phases with names.
package testkit
