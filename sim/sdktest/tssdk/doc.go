// Package tssdk holds a conformance test of the simulator against the
// official TypeScript SDK, @anthropic-ai/sdk, at the exact version pinned in
// js/package.json. The test (tssdk_test.go) serves two simulated worlds over
// loopback TCP and runs `node --test js/sim.test.mjs` against them; it needs
// node and npm on PATH and installs js/node_modules with `npm ci` when they
// are missing. It skips under -short, and skips when node or npm is absent
// unless SLUICE_REQUIRE_NODE=1.
//
// The package has no non-test code.
package tssdk
