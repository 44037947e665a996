package batch

import (
	"errors"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/call"
	"github.com/sluice-dev/sluice/internal/engine/client"
	"github.com/sluice-dev/sluice/internal/engine/event"
	"github.com/sluice-dev/sluice/keys"
)

// Defaults of Config.
const (
	DefaultChunkSize     = 500
	DefaultMaxChunkBytes = 250 << 20 // a margin under api.MaxBatchBytes
	DefaultPollMin       = 2 * time.Second
	DefaultPollMax       = 60 * time.Second
	DefaultExpiryGrace   = 30 * time.Minute
	DefaultStuckAfter    = 4 * time.Hour
	DefaultCancelWait    = 15 * time.Minute
	DefaultCreateGrace   = 60 * time.Second
	DefaultClockSkew     = 2 * time.Minute
	// DefaultWindowChunks is the default window in chunks: 5 × 500 =
	// 2,500 requests per org, half the simulator preset's starvation size.
	DefaultWindowChunks = 5
	// MinStuckAfter is the floor a planner should put under a StuckAfter
	// it derives from predicted turnarounds: a batch is only cancelled as
	// stuck this long after its create at the earliest. The Runner itself
	// uses Config.StuckAfter as given (tests use minutes).
	MinStuckAfter = 30 * time.Minute
)

// ProvisionalOrgPrefix starts the provisional organization id that
// dispatch.Discover gives a key whose probe did not name its org. Such a
// key is not used for batches: its org id would never match a journal's.
const ProvisionalOrgPrefix = "key:"

// Config configures a Runner. Client, Keys, Journal, OnResult and OnReroute
// are required.
type Config struct {
	// Client sends every batch call; results files are streamed through
	// its Stream method, line by line.
	Client *client.Client

	// Keys whose Org is set (dispatch.Discover). Batches belong to an
	// organization, so the first live key of each org makes all of that
	// org's batch calls; the next key of the org takes over if it dies.
	// Keys with a provisional org ("key:…") are left out. With no usable
	// key at all the Runner still opens: new requests are re-routed and
	// journaled chunks held back (see Runner.Holds).
	Keys []*keys.Key
	// Journal is the path of the write-ahead journal (created if missing).
	Journal string
	// NoSync skips fsync (tests only).
	NoSync bool
	// Done reports whether the results file already holds a kept result
	// for a custom_id; on resume, rows of done ids are neither delivered
	// nor waited for. Nil means nothing is done.
	Done func(customID string) bool

	// ChunkSize is the most requests per batch (default 500, at most
	// api.MaxBatchRequests).
	ChunkSize int
	// MaxChunkBytes is the most bytes per create body (default 250 MiB, at
	// most api.MaxBatchBytes).
	MaxChunkBytes int64
	// WindowPerOrg is the most requests in unended batches per org
	// (default 5 × ChunkSize: 2,500 at the default chunk): a chunk is
	// created on an org only when it fits. Chunks are never larger than
	// the largest window.
	WindowPerOrg int
	// WindowByOrg overrides WindowPerOrg per organization, keyed by the
	// org's LABEL: the Label() of the org's first key in Keys (the
	// simulator's org names, and the planner's BatchRun.WindowByOrg keys).
	// Entries <= 0 and labels that name no org are ignored. An org whose
	// window is below the chunk size only ever takes a partial chunk.
	WindowByOrg map[string]int
	// HarvestOnly makes the Runner finish the chunks the journal left open
	// and create nothing new: a request that would need a new batch is
	// re-routed at once. For a run routed to sync that found an open
	// journal (HasJournal).
	HarvestOnly bool

	// PollMin and PollMax bound the poll interval of one batch, which
	// starts at PollMin and grows ×1.5 (defaults 2 s, 60 s).
	PollMin, PollMax time.Duration
	// A batch's deadline is the earlier of Deadline (if set) and its
	// expires_at + ExpiryGrace. A batch not ended by its deadline is
	// cancelled, its ended rows harvested and the rest re-routed.
	Deadline    time.Time
	ExpiryGrace time.Duration // default 30 min
	// Turnaround is the planner's predicted create-to-end time of one
	// batch. With a Deadline, no batch is created once now + Turnaround
	// passes it: those requests are re-routed to sync at once. 0 means
	// unknown: creates stop only at the Deadline itself.
	Turnaround time.Duration
	// SeedWait bounds how long an organization holds its chunks of a
	// shared prompt prefix while that prefix's seed batch runs (seed.go),
	// and is the base of a failed seed's retry back-off. 0: Turnaround,
	// else 10 minutes.
	SeedWait time.Duration
	// StuckAfter: a batch in progress this long after its intent is
	// cancelled, its ended rows harvested, the rest re-routed (default
	// 4 h; < 0 disables). It is used as given: a planner deriving it from
	// predicted turnarounds should floor it at MinStuckAfter.
	StuckAfter time.Duration
	// CancelWait bounds the wait for a batch sluice cancelled to end;
	// after it the batch is given up and its requests re-routed (default
	// 15 min).
	CancelWait time.Duration
	// CreateGrace: a retrieve answering 404 this soon after create is the
	// API's read-after-write delay, not a lost batch; and an intent whose
	// create may have happened is looked for in the org's list this long
	// before it is declared never created (default 60 s).
	CreateGrace time.Duration
	// ClockSkew is how much earlier than the local intent time a listed
	// batch's created_at may be and still be adopted (default 2 min).
	ClockSkew time.Duration
	// MaxRetryAfter caps the retry-after a rate-limited create, list or
	// poll waits for (default api.DefaultMaxRetryAfter), by the rule the
	// sync dispatcher follows (api.CapRetryAfter): a longer one is logged
	// once per org and honoured up to the cap.
	MaxRetryAfter time.Duration

	// OnResult receives the final result of a request answered by a
	// batch: class ok, final or transport. The callbacks run on Run's
	// goroutine, one at a time.
	OnResult func(Result)
	// OnReroute receives a request the batch path gives back, with the
	// reason: send it through the sync dispatcher. Its result is then the
	// dispatcher's.
	OnReroute func(req *call.Request, why string)
	// OnPrime, if set, receives each primer's outcome (prime.go): a sync
	// request that wrote a shared prefix into an org's prompt cache right
	// before its batch, billed at the sync price. Runs on Run's goroutine
	// like the other callbacks.
	OnPrime func(Prime)
	// Events, if set, records each chunk's lifecycle for the run's history
	// (events.go, docs/see.md): what the journal records, and the end of
	// each batch. It must not block.
	Events event.Recorder

	// Now reads the clock for journal times and deadlines (default
	// time.Now). Waits use the loop's timer: tests run in testing/synctest
	// bubbles.
	Now    func() time.Time
	Logger *slog.Logger
}

// Result is the final word on one request answered by a batch: a
// call.Result (Class, Body as the API sent it, Org and Key labels,
// Usage, StopReason, Err for a non-ok row) and the batch's id.
type Result struct {
	call.Result
	BatchID string
}

func (c *Config) defaults() error {
	if c.Client == nil {
		return errors.New("batch: Config.Client is required")
	}
	if c.OnResult == nil || c.OnReroute == nil {
		return errors.New("batch: Config.OnResult and Config.OnReroute are required")
	}
	if c.Done == nil {
		c.Done = func(string) bool { return false }
	}
	if c.ChunkSize <= 0 {
		c.ChunkSize = DefaultChunkSize
	}
	c.ChunkSize = min(c.ChunkSize, api.MaxBatchRequests)
	if c.MaxChunkBytes <= 0 {
		c.MaxChunkBytes = DefaultMaxChunkBytes
	}
	c.MaxChunkBytes = min(c.MaxChunkBytes, api.MaxBatchBytes)
	if c.WindowPerOrg <= 0 {
		c.WindowPerOrg = DefaultWindowChunks * c.ChunkSize
	}
	if c.PollMin <= 0 {
		c.PollMin = DefaultPollMin
	}
	if c.PollMax <= 0 {
		c.PollMax = DefaultPollMax
	}
	c.PollMax = max(c.PollMax, c.PollMin)
	if c.ExpiryGrace <= 0 {
		c.ExpiryGrace = DefaultExpiryGrace
	}
	if c.StuckAfter == 0 {
		c.StuckAfter = DefaultStuckAfter
	}
	if c.CancelWait <= 0 {
		c.CancelWait = DefaultCancelWait
	}
	if c.CreateGrace <= 0 {
		c.CreateGrace = DefaultCreateGrace
	}
	if c.ClockSkew <= 0 {
		c.ClockSkew = DefaultClockSkew
	}
	if c.MaxRetryAfter <= 0 {
		c.MaxRetryAfter = api.DefaultMaxRetryAfter
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
