package cost

import (
	"cmp"
	"slices"
	"sync"

	"github.com/sluice-dev/sluice/api"
)

// Ledger totals usage and cost per organization and per model. The zero
// Ledger is empty and ready to use; a Ledger is safe for concurrent use.
//
// The ledger keeps integer token counts per (organization, model, batch)
// and prices them when asked, summing in a fixed order, so its dollar
// figures do not depend on the order in which requests were added, and
// Total equals Snapshot().Total.USD exactly.
type Ledger struct {
	mu      sync.Mutex
	buckets map[bucketKey]*bucket // guarded by mu
	order   []bucketKey           // keys of buckets, sorted; guarded by mu
}

// bucketKey names the requests of one organization, model and price class.
type bucketKey struct {
	org, model string
	batch      bool
}

// bucket is what the ledger holds for one bucketKey.
type bucket struct {
	tokens   Tokens
	requests int64
	prices   api.Prices
	known    bool
}

func (b *bucket) usd(batch bool) float64 {
	if !b.known {
		return 0
	}
	return priceTokens(b.prices, b.tokens, batch)
}

func compareKeys(a, b bucketKey) int {
	if c := cmp.Compare(a.org, b.org); c != 0 {
		return c
	}
	if c := cmp.Compare(a.model, b.model); c != 0 {
		return c
	}
	switch {
	case a.batch == b.batch:
		return 0
	case !a.batch:
		return -1
	}
	return 1
}

// Add records one response: its org (an organization id or label; "" is a
// bucket like any other), its model, its usage, and whether it was a Message
// Batches request (usage with service_tier "batch" counts as batch too). A
// model the catalog does not know has its tokens counted, no cost, and is
// counted in UnknownModelRequests.
func (l *Ledger) Add(org, model string, u api.Usage, batch bool) {
	k := bucketKey{org, model, batch || u.ServiceTier == api.TierBatch}
	t := TokensOf(u)
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[k]
	if !ok {
		if l.buckets == nil {
			l.buckets = make(map[bucketKey]*bucket)
		}
		b = &bucket{}
		b.prices, b.known = Price(model)
		l.buckets[k] = b
		i, _ := slices.BinarySearchFunc(l.order, k, compareKeys)
		l.order = slices.Insert(l.order, i, k)
	}
	b.tokens.add(t)
	b.requests++
}

// Total returns the USD cost of everything added so far.
func (l *Ledger) Total() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The same sums, in the same order, as Snapshot's.
	var syncUSD, batchUSD float64
	for _, k := range l.order {
		if k.batch {
			batchUSD += l.buckets[k].usd(true)
		} else {
			syncUSD += l.buckets[k].usd(false)
		}
	}
	return syncUSD + batchUSD
}

// Totals is the usage and cost of a set of requests.
type Totals struct {
	Requests      int64 `json:"requests"`       // all requests, batch included
	BatchRequests int64 `json:"batch_requests"` // Message Batches requests
	// UnknownModelRequests counts requests for models without a price; their
	// tokens are in Tokens, their cost is not in USD.
	UnknownModelRequests int64   `json:"unknown_model_requests"`
	Tokens               Tokens  `json:"tokens"`
	SyncUSD              float64 `json:"sync_usd"`  // at standard prices
	BatchUSD             float64 `json:"batch_usd"` // at batch prices
	USD                  float64 `json:"usd"`       // SyncUSD + BatchUSD
}

// Snapshot is a ledger's totals at one moment, for reports. It shares
// nothing with the Ledger.
type Snapshot struct {
	Total  Totals            `json:"total"`
	Orgs   map[string]Totals `json:"orgs"`   // by the org passed to Add
	Models map[string]Totals `json:"models"` // by the model passed to Add
	// UnknownModels lists, sorted, the models that had no price.
	UnknownModels []string `json:"unknown_models,omitempty"`
}

// Snapshot returns the totals so far, overall, per organization and per
// model.
func (l *Ledger) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{Orgs: make(map[string]Totals), Models: make(map[string]Totals)}
	for _, k := range l.order {
		b := l.buckets[k]
		var d Totals
		d.Requests = b.requests
		d.Tokens = b.tokens
		if k.batch {
			d.BatchRequests = b.requests
			d.BatchUSD = b.usd(true)
		} else {
			d.SyncUSD = b.usd(false)
		}
		if !b.known {
			d.UnknownModelRequests = b.requests
			if i, found := slices.BinarySearch(s.UnknownModels, k.model); !found {
				s.UnknownModels = slices.Insert(s.UnknownModels, i, k.model)
			}
		}
		s.Total.add(d)
		o := s.Orgs[k.org]
		o.add(d)
		s.Orgs[k.org] = o
		m := s.Models[k.model]
		m.add(d)
		s.Models[k.model] = m
	}
	return s
}

// add adds d to t and recomputes USD.
func (t *Totals) add(d Totals) {
	t.Requests += d.Requests
	t.BatchRequests += d.BatchRequests
	t.UnknownModelRequests += d.UnknownModelRequests
	t.Tokens.add(d.Tokens)
	t.SyncUSD += d.SyncUSD
	t.BatchUSD += d.BatchUSD
	t.USD = t.SyncUSD + t.BatchUSD
}
