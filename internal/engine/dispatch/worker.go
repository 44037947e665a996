package dispatch

import "time"

// An attempt runs deep in net/http on a goroutine of its own, so that the
// loop never waits on the network. A fresh goroutine per attempt grows its
// stack by copying on every attempt, a goroutine that lives on keeps the
// stack it grew (docs/overhead.md, item 8), so attempts run on workers the
// loop reuses.
//
// The loop owns the idle list (Dispatcher.workers): a worker is on it
// from the moment the loop reads its finished attempt until the loop
// hands it the next one, and it blocks on its own channel meanwhile — one
// receive, no select, no shared channel every idle worker waits on. There
// are never more workers than attempts in flight at the peak of the last
// workerIdle; one idle longer is retired when the loop next wakes, and
// every one as Serve returns (then nothing is in flight, so every worker
// is idle).

// workerIdle is how long a worker waits for another attempt before the
// loop retires it.
const workerIdle = 5 * time.Second

// worker is one attempts' goroutine.
type worker struct {
	next  chan *attempt // capacity 1: handing over never blocks the loop; closed: end
	since time.Time     // idle since (loop-owned)
}

// run starts a on the worker that went idle last (its stack is the
// warmest), or on a new one. Loop-owned.
func (d *Dispatcher) run(a *attempt) {
	if n := len(d.workers); n > 0 {
		a.w = d.workers[n-1]
		d.workers[n-1] = nil
		d.workers = d.workers[:n-1]
		a.w.next <- a
		return
	}
	a.w = &worker{next: make(chan *attempt, 1)}
	go d.work(a.w, a)
}

// work runs a, then each attempt the loop hands w, until w is retired.
// After sending an attempt to the loop it never touches it again.
func (d *Dispatcher) work(w *worker, a *attempt) {
	for ; a != nil; a = <-w.next {
		a.out = d.send(a.it, a.key)
		d.done <- a
	}
}

// rest puts w, whose attempt the loop has just read, on the idle list.
// Loop-owned.
func (d *Dispatcher) rest(w *worker, now time.Time) {
	w.since = now
	d.workers = append(d.workers, w)
}

// retireWorkers ends the workers idle for workerIdle or more by now, or
// every idle one when now is zero. Loop-owned.
func (d *Dispatcher) retireWorkers(now time.Time) {
	n := 0
	for n < len(d.workers) && (now.IsZero() || now.Sub(d.workers[n].since) >= workerIdle) {
		close(d.workers[n].next)
		d.workers[n] = nil
		n++
	}
	if n > 0 {
		d.workers = append(d.workers[:0], d.workers[n:]...)
	}
}
