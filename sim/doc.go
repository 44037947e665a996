// Package sim is a simulated Anthropic API, for tests, benchmarks and dry
// runs (`sluice sim`, `sluice demo`): Messages (plain and streaming),
// count_tokens, the models list and Message Batches over HTTP, with the
// documented rate limits per organization × model pool (continuously
// refilled token buckets for requests, input and output tokens, reported in
// the anthropic-ratelimit-* headers and enforced with 429s), deterministic
// answers, a latency model, prompt caching, fault injection (500s, 529s,
// dropped connections), acceleration limits, workspaces, a batch queue per
// organization, and statistics of what it saw (GET /_sim/stats).
//
// New builds a Server from a Config (Default, or a preset: Preset), and
// Serve serves it on a listener; each organization's keys are fixed fake
// keys, so a test hands them to sluice as a user would set
// ANTHROPIC_API_KEY. Its randomness is a seeded counter-based source and
// TimeScale runs its clock K times faster than real time, so a world is the
// same every run and a minute of it can pass in seconds.
//
// It follows the API's documented behaviour (docs/sim.md says where the
// docs leave room and which reading it takes), not sluice's: sluice is
// measured against it, and never tuned to it alone.
package sim
