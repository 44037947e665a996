package cost

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/sluice-dev/sluice/api"
)

// Ledger totals usage and cost per organization and per model. The zero
// Ledger is empty and ready to use; a Ledger is safe for concurrent use.
//
// The ledger keeps integer token counts per (organization, model, batch,
// long-context band) — each request's band decided from its own usage —
// and prices them when asked, summing in a fixed order, so its dollar
// figures do not depend on the order in which requests were added, and
// Total equals Snapshot().Total.PricedUSD exactly.
type Ledger struct {
	mu      sync.Mutex
	buckets map[bucketKey]*bucket // guarded by mu
	order   []bucketKey           // keys of buckets, sorted; guarded by mu
}

// bucketKey names the requests of one organization, model and price class
// (batch or not, over the model's long-context threshold or not).
type bucketKey struct {
	org, model  string
	batch, long bool
}

// bucket is what the ledger holds for one bucketKey.
type bucket struct {
	tokens   Tokens
	requests int64
	rate     rate
}

// usd is the bucket's cost, 0 without a price.
func (b *bucket) usd() float64 {
	if !b.rate.known {
		return 0
	}
	return b.rate.price(b.tokens)
}

// bound is the bucket's cost, at the catalog's highest prices without a
// price of its own (with no long-context multiplier: the bucket's
// requests' sizes are not kept).
func (b *bucket) bound(batch bool) float64 {
	if b.rate.known {
		return b.rate.price(b.tokens)
	}
	r := maxRate(0)
	if batch {
		r.mult *= api.BatchDiscount
	}
	return r.price(b.tokens)
}

func compareKeys(a, b bucketKey) int {
	if c := cmp.Compare(a.org, b.org); c != 0 {
		return c
	}
	if c := cmp.Compare(a.model, b.model); c != 0 {
		return c
	}
	if c := compareBool(a.batch, b.batch); c != 0 {
		return c
	}
	return compareBool(a.long, b.long)
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// Add records one response: its org (an organization id or label; "" is a
// bucket like any other), its model, its usage, and whether it was a Message
// Batches request (usage with service_tier "batch" counts as batch too). A
// request over its model's long-context threshold is priced at the rule's
// multiple. A model without a price has its tokens counted, no cost, and
// is counted in UnknownModelRequests: its cost is unknown.
func (l *Ledger) Add(org, model string, u api.Usage, batch bool) {
	m, known := api.LookupModel(model)
	k := bucketKey{org, model, batch || u.ServiceTier == api.TierBatch, m.LongContext.Over(u)}
	t := TokensOf(u)
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[k]
	if !ok {
		if l.buckets == nil {
			l.buckets = make(map[bucketKey]*bucket)
		}
		b = &bucket{rate: rateOf(m, known, k.batch, k.long)}
		l.buckets[k] = b
		i, _ := slices.BinarySearchFunc(l.order, k, compareKeys)
		l.order = slices.Insert(l.order, i, k)
	}
	b.tokens.add(t)
	b.requests++
}

// Total returns the USD cost of everything priced so far: the whole cost
// when Unpriced is 0, else only the priced part.
func (l *Ledger) Total() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The same sums, in the same order, as Snapshot's.
	var syncUSD, batchUSD float64
	for _, k := range l.order {
		if k.batch {
			batchUSD += l.buckets[k].usd()
		} else {
			syncUSD += l.buckets[k].usd()
		}
	}
	return syncUSD + batchUSD
}

// Bound returns an upper bound of the cost so far: the priced part, and
// the requests of models without a price at the catalog's highest prices.
// A spend cap compares it, so it errs on the side of stopping.
func (l *Ledger) Bound() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var usd float64
	for _, k := range l.order {
		usd += l.buckets[k].bound(k.batch)
	}
	return usd
}

// Unpriced returns how many requests added so far have no price.
func (l *Ledger) Unpriced() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, k := range l.order {
		if b := l.buckets[k]; !b.rate.known {
			n += b.requests
		}
	}
	return n
}

// Totals is the usage and cost of a set of requests.
type Totals struct {
	Requests      int64 `json:"requests"`       // all requests, batch included
	BatchRequests int64 `json:"batch_requests"` // Message Batches requests
	// UnknownModelRequests counts requests for models without a price; their
	// tokens are in Tokens, their cost is not in USD: with any, the cost is
	// unknown (Known false, and the JSON's usd fields are null beside
	// priced_usd).
	UnknownModelRequests int64 `json:"unknown_model_requests"`
	// LongContextRequests counts requests billed at their model's
	// long-context multiple.
	LongContextRequests int64   `json:"long_context_requests,omitempty"`
	Tokens              Tokens  `json:"tokens"`
	SyncUSD             float64 `json:"sync_usd"`  // priced, at standard prices
	BatchUSD            float64 `json:"batch_usd"` // priced, at batch prices
	USD                 float64 `json:"usd"`       // SyncUSD + BatchUSD
}

// Known reports whether every request is priced, so USD is the cost.
func (t Totals) Known() bool { return t.UnknownModelRequests == 0 }

// MarshalJSON writes the totals; with requests of models without a price,
// usd, sync_usd and batch_usd are null (the cost is unknown, not the
// priced part) and priced_usd holds the priced part.
func (t Totals) MarshalJSON() ([]byte, error) {
	type plain Totals
	out := struct {
		plain
		SyncUSD   *float64 `json:"sync_usd"`
		BatchUSD  *float64 `json:"batch_usd"`
		USD       *float64 `json:"usd"`
		PricedUSD float64  `json:"priced_usd"`
	}{plain: plain(t), PricedUSD: t.USD}
	if t.Known() {
		out.SyncUSD, out.BatchUSD, out.USD = &t.SyncUSD, &t.BatchUSD, &t.USD
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON wrote (USD from priced_usd when the
// cost was unknown).
func (t *Totals) UnmarshalJSON(b []byte) error {
	type plain Totals
	in := struct {
		*plain
		PricedUSD *float64 `json:"priced_usd"`
	}{plain: (*plain)(t)}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	if in.PricedUSD != nil {
		t.USD = *in.PricedUSD
	}
	return nil
}

// FormatUSD renders a cost for people: "$1.2345", or, when some requests
// have no price, "unknown (priced $1.2345; 600 requests of models without
// a price)".
func (t Totals) FormatUSD() string {
	if t.Known() {
		return fmt.Sprintf("$%.4f", t.USD)
	}
	return fmt.Sprintf("unknown (priced $%.4f; %d requests of models without a price)", t.USD, t.UnknownModelRequests)
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
			d.BatchUSD = b.usd()
		} else {
			d.SyncUSD = b.usd()
		}
		if k.long {
			d.LongContextRequests = b.requests
		}
		if !b.rate.known {
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
	t.LongContextRequests += d.LongContextRequests
	t.Tokens.add(d.Tokens)
	t.SyncUSD += d.SyncUSD
	t.BatchUSD += d.BatchUSD
	t.USD = t.SyncUSD + t.BatchUSD
}
