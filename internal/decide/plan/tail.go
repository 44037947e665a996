package plan

import (
	"math"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/api"
)

// The tail of a sync job. A job ends with its slowest answer still
// outstanding, not an average one: the wall-clock is the last send plus the
// expected overshoot of the last end past it. One latency is
//
//	(TTFT + k ÷ TokensPerSec) · e^(σz),   k uniform on the output model's
//	                                       range, capped at max_tokens,
//
// so the spread of answer lengths, not only σ, makes the tail.
//
// Requests are sent in a first wave at 0 and then evenly until the last
// send T; the job is done by T + x when every one of them is, and the
// expected overshoot is ∫ P(not all done by T + x) dx (overshoot below).
// docs/prediction.md measures why the mean latency in its place is not
// enough.

// latencyMix is the latency distribution as a mixture of log-normals, one
// per answer length.
type latencyMix struct {
	med   []float64 // median latency of each length (s)
	w     []float64 // its weight
	sigma float64
}

// tailPoints is how many answer lengths the mixture uses.
const tailPoints = 17

func (w World) latencyMix(lat Latency, maxTokens int) latencyMix {
	a, b := float64(w.Output.Min), float64(w.Output.Max)
	if maxTokens > 0 {
		b = math.Min(b, float64(maxTokens))
	}
	m := latencyMix{sigma: lat.Sigma}
	if b <= a || w.Output.Max <= w.Output.Min {
		m.med, m.w = []float64{lat.median(b)}, []float64{1}
		return m
	}
	// Uniform on [a, Max]: the part above the cap sits at the cap.
	span := float64(w.Output.Max) - a
	below := (b - a) / span
	for i := range tailPoints {
		k := a + (float64(i)+0.5)/tailPoints*(b-a)
		m.med = append(m.med, lat.median(k))
		m.w = append(m.w, below/tailPoints)
	}
	if below < 1 {
		m.med = append(m.med, lat.median(b))
		m.w = append(m.w, 1-below)
	}
	return m
}

// phi is the standard normal CDF.
func phi(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// cdf is P(latency ≤ x).
func (m latencyMix) cdf(x float64) float64 {
	if x <= 0 {
		return 0
	}
	p := 0.0
	for i, med := range m.med {
		if m.sigma == 0 {
			if med <= x {
				p += m.w[i]
			}
			continue
		}
		p += m.w[i] * phi(math.Log(x/med)/m.sigma)
	}
	return p
}

// max is the largest median latency times e^(6σ): past it nothing runs.
func (m latencyMix) max() float64 {
	top := 0.0
	for _, med := range m.med {
		top = math.Max(top, med)
	}
	return top * math.Exp(6*m.sigma)
}

// overshoot returns the expected time from the last send T to the last
// answer, and its 90th percentile, for n requests of which first are sent
// at 0, the last at T and the rest evenly over (0, T). A request sent at t
// is still running x after T with probability S(T − t + x), so
//
//	log P(all done by T + x) = first·log F(T + x) + log F(x) + (n − first − 1)/T · ∫₀ᵀ log F(u + x) du.
//
// The last send is a point at T, not part of the spread: for a slow stream
// of sends the spread alone would put almost nothing near T and the
// overshoot would fall below one answer's latency, which the last request
// still takes.
func (m latencyMix) overshoot(n, first int, T float64) (mean, p90 float64) {
	const steps, inner = 160, 24
	top := m.max()
	dx := top / steps
	span := math.Min(T, top) // older sends are surely done
	for i := range steps {
		x := (float64(i) + 0.5) * dx
		logDone := 0.0
		if T <= 0 {
			logDone = float64(n) * logF(m, x)
		} else {
			if first > 0 {
				logDone += float64(first) * logF(m, T+x)
			}
			if n > first {
				logDone += logF(m, x) // the last send, at T
			}
			du := span / inner
			integral := 0.0
			for k := range inner {
				integral += logF(m, (float64(k)+0.5)*du+x) * du
			}
			logDone += float64(max(n-first-1, 0)) / T * integral
		}
		p := 1 - math.Exp(logDone)
		mean += p * dx
		if p > 0.1 {
			p90 = x + dx/2
		}
	}
	return mean, p90
}

// logF is log P(latency ≤ x), −Inf when it is 0.
func logF(m latencyMix, x float64) float64 { return math.Log(m.cdf(x)) }

// tailKey identifies one overshoot computation: Decide asks for the same
// ones many times (crossover search, guidelines), so they are memoized.
type tailKey struct {
	lat       Latency
	out       OutputModel
	maxTokens int
	n, first  int
	T         float64
	rate      float64 // long jobs: the sending rate, to 4 significant digits
}

var tailMemo sync.Map // tailKey → [2]float64

// tail is latencyMix(lat, maxTokens).overshoot(n, first, T), memoized.
// Once T is longer than any latency the answer depends only on the sending
// rate (the first wave and older sends are surely done), so long jobs share
// one entry per rate, to four significant digits.
func (w World) tail(lat Latency, maxTokens, n, first int, T float64) (mean, p90 float64) {
	first = min(first, n)
	k := tailKey{lat: lat, out: w.Output, maxTokens: maxTokens, n: n, first: first, T: math.Round(T*1000) / 1000}
	mix := w.latencyMix(lat, maxTokens)
	if top := mix.max(); T > top {
		rate := float64(n-first) / T
		digits := math.Pow(10, 3-math.Floor(math.Log10(rate)))
		rate = math.Round(rate*digits) / digits
		// Same rate over a span of exactly top: n − first = rate · top.
		k.n, k.first, k.T, k.rate = 0, 0, top, rate
		if v, ok := tailMemo.Load(k); ok {
			r := v.([2]float64)
			return r[0], r[1]
		}
		mean, p90 = mix.overshootRate(rate)
		tailMemo.Store(k, [2]float64{mean, p90})
		return mean, p90
	}
	if v, ok := tailMemo.Load(k); ok {
		r := v.([2]float64)
		return r[0], r[1]
	}
	// From the key's values, so a result never depends on which caller
	// filled the memo first.
	mean, p90 = mix.overshoot(k.n, k.first, k.T)
	tailMemo.Store(k, [2]float64{mean, p90})
	return mean, p90
}

// overshootRate is overshoot for sends at rate r long enough that the
// first wave and the oldest sends are surely done.
func (m latencyMix) overshootRate(rate float64) (mean, p90 float64) {
	top := m.max()
	return m.overshoot(max(1, int(math.Round(rate*top))), 0, top) // at least the last send
}

// ExpectedTail is the expected time from the last send to the last answer
// for a job of n requests of this shape in world w, first of them sent at
// once and the rest evenly until the last send at sendAt: what the central
// sync prediction adds to the last send.
func ExpectedTail(w World, j Job, n, first int, sendAt time.Duration) (time.Duration, error) {
	j, err := w.resolve(j)
	if err != nil {
		return 0, err
	}
	mean, _ := w.tail(w.latency(api.PoolOf(j.Model)), j.MaxTokens, n, first, sendAt.Seconds())
	return seconds(mean), nil
}
