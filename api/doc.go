// Package api holds the wire types and facts of the Anthropic API that every
// other sluice package shares: request and result lines of the Message
// Batches format, Messages request and response shapes, error bodies,
// rate-limit headers, and the model catalog (pools, prices, cache minimums).
//
// It imports only the standard library, so the simulator, the client and the
// dispatcher agree on one definition of the wire.
package api
