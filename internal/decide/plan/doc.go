// Package plan predicts how long a job of N Claude API calls takes and what
// it costs on the sync route (the dispatch engine) and on the batch route
// (Message Batches), and picks a route for a priority: the least
// wall-clock, the least money, or a balance of the two.
//
// A World describes the keys' organizations (their per-minute limits per
// model pool and their batch queues) and the behaviour of the engine and of
// the batch queue; FromModel (from an apimodel.Model, such as sim.Config.Model or sim.PresetModel), NewWorld and ReadWorld build one. A Job
// is the shape of the work: how many requests, which model, how many tokens
// each. Decide returns a Decision: the route, the organizations and lanes
// it uses, chunking and in-flight window for batches, the predicted
// wall-clock with a range, the cost of each route, what binds, the
// crossover N and a paragraph saying why.
//
// Everything is deterministic arithmetic and a small discrete-event
// simulation of the batch queue: no clock, no randomness, no I/O beyond
// ReadWorld. docs/plan.md describes the model, its parameters and their
// provenance; Guidelines renders docs/guidelines.md from it.
package plan
