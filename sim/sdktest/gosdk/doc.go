// Package gosdk holds conformance tests that drive the simulator (package
// sim) over loopback HTTP with the official Anthropic Go SDK, both major
// lines: github.com/anthropics/anthropic-sdk-go (v1, x-api-key and
// anthropic-version 2023-06-01) and github.com/anthropics/anthropic-sdk-go/v2
// (Authorization: Bearer and anthropic-version 2026-10-21). It has no
// non-test code.
package gosdk
