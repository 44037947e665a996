package job

import (
	"encoding/json"
	"sync/atomic"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/decide/route"
	"github.com/sluice-dev/sluice/internal/engine/cost"
	"github.com/sluice-dev/sluice/internal/engine/dispatch"
	"github.com/sluice-dev/sluice/internal/format/results"
	"github.com/sluice-dev/sluice/internal/store/cache"
)

// cacheSide is a run's use of the response cache: lookups before a request
// is sent, stores after an answer arrives. With no cache every method is a
// no-op.
type cacheSide struct {
	c      *cache.Cache
	extra  []string
	accept func(message []byte) bool
	w      *results.Writer
	writer *cache.Writer // nil unless the cache is writable

	hits  atomic.Int64
	saved cost.Ledger // what the hits would have cost on sync
}

func newCacheSide(o Options, w *results.Writer) *cacheSide {
	cs := &cacheSide{w: w, extra: o.CacheExtra, accept: o.Redrive.accept}
	if o.Cache == nil || o.Cache.Mode() == cache.Off {
		return cs
	}
	cs.c = o.Cache
	if o.Cache.Mode() == cache.On {
		cs.writer = o.Cache.NewWriter()
	}
	return cs
}

// serve answers req from the cache if it holds the answer, writing the
// row (route "cache", no cost). It reports whether it did.
func (cs *cacheSide) serve(req *dispatch.Request) (bool, error) {
	if cs.c == nil {
		return false, nil
	}
	k, err := cache.KeyOf(req.Params, cs.extra...)
	if err != nil {
		return false, nil
	}
	msg, ok := cs.c.Get(k)
	if !ok || !cs.accept(msg) {
		return false, nil
	}
	var m struct {
		Model string    `json:"model"`
		Usage api.Usage `json:"usage"`
	}
	if json.Unmarshal(msg, &m) == nil {
		model := m.Model
		if model == "" {
			model = req.Model
		}
		cs.saved.Add("cache", model, m.Usage, false)
	}
	res := api.SucceededResult(msg)
	rec := api.ResultRecord{CustomID: req.ID, Result: res, Sluice: &api.RunMeta{
		ParamsHash: req.ParamsHash, Class: api.ClassOK, Route: route.Cache,
	}}
	if err := cs.w.Write(rec); err != nil {
		return true, err
	}
	cs.hits.Add(1)
	return true, nil
}

// store queues an answer for the cache; the writer refuses non-answers.
// A request whose params are not known (a batch left open by an earlier
// run, harvested from the journal) is not stored.
func (cs *cacheSide) store(req *dispatch.Request, message []byte, origin string) {
	if cs.writer == nil || req == nil || len(req.Params) == 0 {
		return
	}
	cs.writer.Add(cache.Entry{Params: req.Params, Extra: cs.extra, Message: message,
		Meta: cache.Meta{CustomID: req.ID, Origin: origin}})
}

// finish flushes the stores and fills the report's cache section. Safe to
// call more than once.
func (cs *cacheSide) finish(rep *Report) {
	if cs.c == nil {
		return
	}
	if cs.writer != nil {
		if err := cs.writer.Close(); err != nil {
			rep.Cache.Error = err.Error()
		}
		rep.Cache.Stored, rep.Cache.Refused = cs.writer.Stored(), cs.writer.Refused()
		cs.writer = nil
	}
	rep.Cache.Mode = cs.c.Mode().String()
	rep.Cache.Hits = cs.hits.Load()
	rep.Cache.SavedUSD = cs.saved.Total()
	rep.Requests.FromCache = int(rep.Cache.Hits)
}
