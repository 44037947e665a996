package dispatch

import "context"

// reclaimCall is one Reclaim, handled by the loop.
type reclaimCall struct {
	want  func(*Request) bool
	count bool // only count what would be taken
	out   chan []*Request
	n     chan int
}

// Reclaim takes back the queued requests want accepts that have never
// been attempted — a re-plan sending them another way (docs/route.md,
// "Re-planning mid-run"); streamed requests (SubmitSend) stay. The rest
// of each queue keeps its order. A reclaimed request gets no Result from
// this dispatcher: it is the caller's again. Reclaim returns ErrStopped
// once Serve has returned.
func (d *Dispatcher) Reclaim(ctx context.Context, want func(*Request) bool) ([]*Request, error) {
	c := reclaimCall{want: want, out: make(chan []*Request, 1)}
	select {
	case d.reclaim <- c:
	case <-d.served:
		return nil, ErrStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return <-c.out, nil
}

// Reclaimable counts the requests Reclaim would take back with a filter
// that accepts every one: queued and never attempted.
func (d *Dispatcher) Reclaimable(ctx context.Context) (int, error) {
	c := reclaimCall{count: true, n: make(chan int, 1)}
	select {
	case d.reclaim <- c:
	case <-d.served:
		return 0, ErrStopped
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return <-c.n, nil
}

// fresh reports whether it may be reclaimed: queued, never attempted, not
// streamed.
func (it *item) fresh() bool { return it.where == atQueue && it.attempts == 0 && it.send == nil }

// reclaimNow is Reclaim and Reclaimable on the loop.
func (d *Dispatcher) reclaimNow(c reclaimCall) {
	if c.count {
		n := 0
		for _, q := range d.queues {
			for _, it := range q.items[q.head:] {
				if it.fresh() {
					n++
				}
			}
		}
		for _, its := range d.parked { // queued too, set aside behind a writer
			for _, it := range its {
				if it.fresh() {
					n++
				}
			}
		}
		c.n <- n
		return
	}
	var out []*Request
	for _, q := range d.queues {
		keep := q.items[:q.head]
		for _, it := range q.items[q.head:] {
			if it.fresh() && c.want(it.req) {
				it.where = atEnd
				d.queued--
				out = append(out, it.req)
				continue
			}
			keep = append(keep, it)
		}
		clear(q.items[len(keep):])
		q.items = keep
	}
	for p, its := range d.parked {
		keep := its[:0]
		for _, it := range its {
			if it.fresh() && c.want(it.req) {
				it.where = atEnd
				d.queued--
				d.parkedN[it.pool]--
				out = append(out, it.req)
				continue
			}
			keep = append(keep, it)
		}
		clear(its[len(keep):])
		if len(keep) == 0 {
			delete(d.parked, p)
		} else {
			d.parked[p] = keep
		}
	}
	d.mu.Lock()
	d.stats.Submitted -= int64(len(out))
	d.mu.Unlock()
	c.out <- out
}
