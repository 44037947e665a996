// Package gosdk holds conformance tests that drive the sluice proxy (package
// proxy), in front of the simulator, with the official Anthropic Go SDK,
// both major lines: github.com/anthropics/anthropic-sdk-go (v1) and
// github.com/anthropics/anthropic-sdk-go/v2. Plain and streaming messages,
// a batch round trip, and errors surfacing as the SDK's own *Error. It has
// no non-test code.
package gosdk
