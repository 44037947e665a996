// Package jsonl reads and checks sluice input files: JSON Lines of Message
// Batches requests, one {"custom_id": …, "params": {…}} object per line.
//
// A Reader streams lines of any length; ValidateLine checks one line against
// the rules the API would apply before a request is sent; a Validator adds
// custom_id uniqueness across a file and tallies a Summary; ScanFile does all
// of it for a whole file. ParamsHash fingerprints a request's params so a
// resumed run can tell when the request under a finished custom_id changed.
package jsonl
