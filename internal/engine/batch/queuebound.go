package batch

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/client"
)

// Message Batches limit the requests in an organization's processing queue
// (rate-limits page: 100,000 on the lowest documented tier, 500,000 on the
// top one). A create refused with 429 because the queue is full tells the
// batch path that bound: the figure its message names, else about the
// requests the org then had in flight (this chunk's included, which did
// not fit). The org pauses (lifecycle.go), its window shrinks to the bound
// for the rest of the run, and Stats.QueueBound hands it to the planner's
// observations (package observe), so the next plan keeps each org's
// batches in flight within it.
//
// An inferred bound is an estimate, not a fact: colleagues' batches share
// the queue, so a refusal at sluice's own count says only that the queue
// was full then. Every accepted create is evidence the other way: the
// queue took the window sluice then had in flight there
// (QueueBound.Accepted: requests in unended batches, the units of an
// inferred bound and of the planner's window). So an inferred bound is
// never below the largest window ever accepted, and a later refusal at a
// higher count replaces a lower one. A named figure counts the queue's
// own unprocessed requests; a window above it contradicts nothing, and it
// stands.

// QueueBound is what one organization's full batch queue showed.
type QueueBound struct {
	OrgID string
	// Requests is the bound a full queue showed: the figure a 429 named
	// (Named), or the requests sluice had in flight there when a create
	// was last refused, less one, but never below Accepted (an estimate:
	// other users' batches share the queue). 0: never full this run.
	Requests int64
	Named    bool
	// Accepted is the most requests sluice had in unended batches there
	// right after a create was accepted: a window the queue took.
	Accepted int64
}

// queueFullRE recognises the 429 of a full processing queue, and the
// figure it names ("… limit of 1,500 batch requests in the processing
// queue …"). The API's wording is not published; the test is the word
// "queue".
var (
	queueFullRE  = regexp.MustCompile(`(?i)\bqueue\b`)
	queueLimitRE = regexp.MustCompile(`(?i)\b([0-9][0-9,]*)\s+(?:message\s+)?batch\s+requests`)
)

// queueFull reports whether a create's 429 is a full processing queue,
// and the limit its message names (0: none).
func queueFull(out *client.Outcome) (full bool, named int64) {
	if out.Class != client.RateLimited {
		return false, 0
	}
	var eb api.ErrorBody
	msg := ""
	if err := json.Unmarshal(out.Body, &eb); err == nil {
		msg = eb.Err.Message
	}
	if !queueFullRE.MatchString(msg) {
		return false, 0
	}
	if m := queueLimitRE.FindStringSubmatch(msg); m != nil {
		if n, err := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64); err == nil && n > 0 {
			return true, n
		}
	}
	return true, 0
}

// queueRefused records that o's queue refused chunk c's create, and
// shrinks o's window to the bound (never below c, so a chunk still fits
// once the queue drains). On the loop's goroutine.
func (r *Runner) queueRefused(o *orgState, c *chunk, named int64) {
	b := QueueBound{OrgID: o.id, Requests: max(int64(o.inflight)-1, int64(o.accepted), 1), Named: named > 0, Accepted: int64(o.accepted)}
	if named > 0 {
		b.Requests = named
	}
	if r.stats.QueueBound == nil {
		r.stats.QueueBound = map[string]QueueBound{}
	}
	// The newest evidence: a named figure over an inferred one, else the
	// latest refusal's.
	if old, ok := r.stats.QueueBound[o.label]; !ok || b.Named || !old.Named || old.Requests == 0 {
		r.stats.QueueBound[o.label] = b
	}
	o.window = max(c.n(), min(o.window, int(b.Requests)))
}

// queueAccepted records that o's queue took a create: the requests o now
// has in flight (the new batch's included) are a lower bound of its
// queue's. On the loop's goroutine.
func (r *Runner) queueAccepted(o *orgState) {
	if o.inflight <= o.accepted {
		return
	}
	o.accepted = o.inflight
	if r.stats.QueueBound == nil {
		r.stats.QueueBound = map[string]QueueBound{}
	}
	b := r.stats.QueueBound[o.label]
	b.OrgID, b.Accepted = o.id, int64(o.accepted)
	if !b.Named && b.Requests > 0 && b.Requests < b.Accepted {
		b.Requests = b.Accepted // an inferred bound the queue has since exceeded
	}
	r.stats.QueueBound[o.label] = b
}
