package batch

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/call"
)

// New opens the journal, recovers the chunks it leaves open, and returns a
// Runner ready to Run.
func New(cfg Config) (*Runner, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r := &Runner{
		cfg: cfg, log: cfg.Logger, events: make(chan report),
		holds: map[string]bool{}, recovered: map[string]*chunk{}, parked: map[string]*parkedRow{},
		durWait: map[string]*chunk{}, claimed: map[string]bool{}, warned: map[string]bool{},
	}
	byOrg := map[string]*orgState{}
	for _, k := range cfg.Keys {
		if dead, _ := k.Dead(); dead {
			continue
		}
		id := k.Org()
		if id == "" {
			return nil, fmt.Errorf("batch: key %s has no organization; run dispatch.Discover first", k)
		}
		if strings.HasPrefix(id, ProvisionalOrgPrefix) {
			// Its real org is unknown: batches created with it could not
			// be matched to a journal, nor journaled ones reached.
			r.log.Info("batch: key's organization is unknown; it is not used for batches", "key", k)
			continue
		}
		o := byOrg[id]
		if o == nil {
			o = &orgState{id: id, label: k.Label(), primed: map[uint64]time.Time{}, seeds: map[uint64]*seed{}}
			byOrg[id] = o
			r.orgs = append(r.orgs, o)
		}
		o.keys = append(o.keys, k)
	}
	if len(r.orgs) == 0 {
		r.log.Warn("batch: no key with a known organization; requests are re-routed to sync and journaled batches held back")
	}
	sort.Slice(r.orgs, func(i, j int) bool { return r.orgs[i].label < r.orgs[j].label })
	widest := 0
	for _, o := range r.orgs {
		o.window = cfg.WindowPerOrg
		if w := cfg.WindowByOrg[o.label]; w > 0 {
			o.window = w
		}
		widest = max(widest, o.window)
	}
	target := cfg.ChunkSize
	if widest > 0 {
		target = min(target, widest)
	}

	j, order, entries, err := openJournal(cfg.Journal, cfg.NoSync)
	if err != nil {
		return nil, err
	}
	r.j, r.flush = j, newFlusher(j, r.log)
	j.notify = chunkEvents(cfg.Events, entries) // the history's batch events (events.go)
	now := cfg.Now()
	r.runID = strconv.FormatInt(now.UnixNano(), 36) + "-" + strconv.FormatUint(uint64(rand.Uint32()), 36)
	r.q = queue{target: target - fingerprint(r.runID, target), byteCap: cfg.MaxChunkBytes}
	if err := j.append(record{Op: opRun, V: journalVersion, At: now}, false); err != nil {
		j.close()
		return nil, err
	}
	held := map[string]string{}
	for _, id := range order {
		if err := r.recover(id, entries[id], byOrg, held, now); err != nil {
			j.close()
			return nil, err
		}
	}
	// Submit blocks while two chunks' worth wait to be cut.
	r.in = newIntake(2*target, r.holds, held)
	r.publish()
	return r, nil
}

// recover turns an open journal entry into a chunk of this run, or holds
// its ids back (held: id → params hash) when no usable key reaches its
// batch's org.
func (r *Runner) recover(id string, e *entry, byOrg map[string]*orgState, held map[string]string, now time.Time) error {
	if e.batch != "" {
		r.claimed[e.batch] = true
	}
	if e.closed {
		return nil
	}
	in := e.intent
	todo := 0
	for _, cid := range in.IDs {
		if !r.cfg.Done(cid) {
			todo++
		}
	}
	if todo == 0 {
		return r.j.append(record{Op: opDropped, Chunk: id, At: now, Why: "every request is done"}, false)
	}
	o := byOrg[in.Org]
	if o == nil && e.batch == "" {
		// The journal never saw the batch created: the chunk is closed and
		// its requests start afresh. Were the create to have reached the
		// API after all (a crash right after it), they are paid twice.
		r.log.Warn("batch: a journaled create on an organization no usable key reaches was never confirmed; its requests are sent again",
			"chunk", id, "org", in.OrgLabel, "requests", todo)
		return r.j.append(record{Op: opAbandoned, Chunk: id, At: now,
			Why: "organization unreachable and no batch recorded"}, true)
	}
	if o == nil {
		// The batch exists and may be running: its requests wait for a
		// run with a key of its org rather than be paid twice.
		r.log.Warn("batch: a journaled batch belongs to an organization no usable key reaches; its requests are held back for a run with a key of that organization",
			"chunk", id, "org", in.OrgLabel, "batch", e.batch, "requests", todo)
		for i, cid := range in.IDs {
			if !r.cfg.Done(cid) {
				held[cid] = in.Params[i]
				r.holds[cid] = true
			}
		}
		return nil
	}
	c := &chunk{
		id: id, org: o, ids: in.IDs, hashes: in.Params, index: make(map[string]int, len(in.IDs)), wire: in.Wire,
		bytes: in.Bytes, recovered: true, adopted: e.adopted, plain: in.Plain,
		intentAt: in.At, batch: e.batch, created: e.created, expires: e.expires,
		cancelAt: e.cancelAt, canceled: e.canceled,
		// Its create, if any, was the dead process's: before now.
		createdBy: now,
		reqs:      map[string]*call.Request{}, handled: map[string]bool{},
	}
	for i, cid := range in.IDs {
		c.index[cid] = i
		if r.cfg.Done(cid) {
			c.handled[cid] = true
			continue
		}
		r.recovered[cid] = c
		r.holds[cid] = true
		c.unattached++
	}
	// Its first state: an intent to reconcile (its create unresolved), or
	// a batch to poll at once. Both hold the org's window.
	o.inflight += c.n()
	c.phase = queued
	if c.batch != "" {
		c.phase = polling
		c.try = tries{delay: r.cfg.PollMin}
	} else {
		o.creating++
	}
	r.chunks = append(r.chunks, c)
	r.log.Info("batch: resuming a journaled chunk", "chunk", id, "org", o.label, "batch", c.batch, "requests", c.n(), "to_do", todo)
	return nil
}
