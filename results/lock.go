package results

import "errors"

// ErrLocked is returned (wrapped) by Lock when another process holds the
// results file: two runs appending to one file would both pay for the
// requests neither had finished, and interleave their rows.
var ErrLocked = errors.New("results: another sluice is writing this results file")
