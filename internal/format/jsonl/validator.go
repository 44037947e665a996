package jsonl

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/format/cacheprefix"
)

// Summary tallies the lines a Validator checked.
type Summary struct {
	Lines   int // non-blank lines checked
	Valid   int
	Invalid int // every invalid line, however many errors were kept
	// Models counts valid lines by params.model.
	Models map[string]int
	// EstInputTokens and MaxTokens are sums over valid lines.
	EstInputTokens int64
	MaxTokens      int64
	// LongLines counts the valid lines whose estimated prompt is over
	// their model's long-context threshold (api.LongContext: billed at its
	// multiple), and LongEstInputTokens sums their estimates.
	LongLines          int
	LongEstInputTokens int64
	// Prefix is what prompt caching can spare the pending requests
	// (--cache-prefix auto): filled in by the job's survey, which finds
	// the shared prefixes; zero when off or none.
	// The survey's reach (cacheprefix.Reach: requests, prefix tokens
	// summed, prefixes) at the larger reading of the model's minimum.
	Prefix cacheprefix.Reach
	// BatchPrefix is Prefix at the batch route's threshold (more sharers).
	BatchPrefix cacheprefix.Reach
}

// MeanEstInputTokens returns EstInputTokens per valid line, 0 when none.
func (s Summary) MeanEstInputTokens() float64 { return mean(s.EstInputTokens, s.Valid) }

// LongShare returns the share of valid lines over their model's
// long-context threshold and their mean estimated input (0, 0: none).
func (s Summary) LongShare() (share, meanInput float64) {
	if s.LongLines == 0 || s.Valid == 0 {
		return 0, 0
	}
	return float64(s.LongLines) / float64(s.Valid), mean(s.LongEstInputTokens, s.LongLines)
}

// MainModel returns the most common model among valid lines (ties: the
// first in byte order), or claude-sonnet-4-5 when there are none: the
// model a plan for the whole file is made for.
func (s Summary) MainModel() string {
	best, n := "", 0
	for m, c := range s.Models {
		if c > n || (c == n && m < best) {
			best, n = m, c
		}
	}
	if best == "" {
		return "claude-sonnet-4-5"
	}
	return best
}

// MeanMaxTokens returns MaxTokens per valid line, 0 when none.
func (s Summary) MeanMaxTokens() float64 { return mean(s.MaxTokens, s.Valid) }

func mean(sum int64, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(n)
}

// Validator checks the lines of one input file in order: each line by
// ValidateLine, and custom_ids for uniqueness across the file. It keeps the
// custom_ids seen so far and the line each was first seen on, nothing else
// per line. The zero value is ready to use. A Validator is not safe for
// concurrent use.
type Validator struct {
	// Version, when set, is the API version the lines will be sent with:
	// a line that it or the line's model refuses (CheckCompat, under the
	// model table's rules) is invalid. Set it before the first Check.
	Version string

	seen map[string]int // custom_id → line first seen on
	sum  Summary
}

// Check validates line number lineNo and records it in the Summary. On
// failure the error is a LineError whose Line is lineNo.
//
// A custom_id counts as seen from the first line that carries it in valid
// form, even if that line fails another rule, so a later line reusing it is
// a duplicate ("duplicate custom_id %q, first on line %d", Duplicate set)
// whatever else is wrong with it: one id never gets two results.
//
// The Info is as ValidateLine returns it; Params is a copy.
func (v *Validator) Check(lineNo int, line []byte) (Info, error) {
	return v.check(lineNo, line, true)
}

func (v *Validator) check(lineNo int, line []byte, copyParams bool) (Info, error) {
	info, err := validate(line, copyParams)
	return v.tally(lineNo, info, v.compat(info, err))
}

// tally applies custom_id uniqueness to a line validate judged (err is its
// verdict) and counts it in the Summary.
func (v *Validator) tally(lineNo int, info Info, err error) (Info, error) {
	if v.seen == nil {
		v.seen = make(map[string]int)
		v.sum.Models = make(map[string]int)
	}
	v.sum.Lines++
	if id := info.CustomID; id != "" {
		if first, dup := v.seen[id]; !dup {
			v.seen[id] = lineNo
		} else {
			reason := fmt.Sprintf("duplicate custom_id %q, first on line %d", id, first)
			if le, ok := errors.AsType[LineError](err); ok {
				reason += "; also " + le.Reason
			}
			err = LineError{CustomID: id, Reason: reason, Duplicate: true}
		}
	}
	if err != nil {
		v.sum.Invalid++
		le, _ := errors.AsType[LineError](err)
		le.Line = lineNo
		return info, le
	}
	v.sum.Valid++
	v.sum.Models[info.Model]++
	v.sum.EstInputTokens += info.EstInputTokens
	v.sum.MaxTokens += info.MaxTokens
	if m, ok := api.LookupModel(info.Model); ok && m.LongContext.Over(api.Usage{InputTokens: info.EstInputTokens}) {
		v.sum.LongLines++
		v.sum.LongEstInputTokens += info.EstInputTokens
	}
	return info, nil
}

// CheckShared is Check without the copy: Info.Params aliases line, so it is
// valid only until line is reused. For passes that only need the verdict.
func (v *Validator) CheckShared(lineNo int, line []byte) (Info, error) {
	return v.check(lineNo, line, false)
}

// Summary returns the tally so far. Its Models map is a copy.
func (v *Validator) Summary() Summary {
	s := v.sum
	s.Models = make(map[string]int, len(v.sum.Models))
	for m, n := range v.sum.Models {
		s.Models[m] = n
	}
	return s
}

// ScanFile validates the input file at path, streaming it, and returns the
// Summary with the first maxErrors LineErrors in line order (all of them
// when maxErrors < 0, none when it is 0); Summary.Invalid counts every
// invalid line. The error is an I/O error opening or reading the file; an
// invalid line is never one.
func ScanFile(path string, maxErrors int) (Summary, []LineError, error) {
	return ScanFileVersion(path, "", maxErrors)
}

// ScanFileVersion is ScanFile with lines checked, as Validator.Version
// says, against what API version (and each line's model) refuses; ""
// checks no version.
func ScanFileVersion(path, version string, maxErrors int) (Summary, []LineError, error) {
	f, err := os.Open(path)
	if err != nil {
		return Summary{}, nil, fmt.Errorf("jsonl: %w", err)
	}
	defer f.Close()
	v := Validator{Version: version}
	var errs []LineError
	r := NewReader(f)
	for {
		line, n, err := r.Next()
		if err == io.EOF {
			return v.Summary(), errs, nil
		}
		if err != nil {
			return v.Summary(), errs, fmt.Errorf("jsonl: line %d: %w", n, err)
		}
		if _, err := v.check(n, line, false); err != nil && (maxErrors < 0 || len(errs) < maxErrors) {
			le, _ := errors.AsType[LineError](err)
			errs = append(errs, le)
		}
	}
}
