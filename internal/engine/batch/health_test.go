package batch

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-dev/sluice/keys"
	"github.com/sluice-dev/sluice/sim"
)

// TestBatchAnswerClearsSuspicion: after a 5 s auth outage on the batch
// path, the batch calls that succeed end the key's suspicion (the batch
// path once never told the key it was answered again).
func TestBatchAnswerClearsSuspicion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		w.sim.SetKeyStatus("batch", sim.KeyRevoked)
		time.AfterFunc(5*time.Second, func() { w.sim.SetKeyStatus("batch", sim.KeyActive) })
		reqs := requests(30)
		col, _, err := w.run(t, w.config(), reqs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkAllOK(t, reqs, col)
		if w.key(t, "batch").Suspect(keys.AllPools) {
			t.Errorf("key still suspect after the outage ended and many successful batch calls")
		}
	})
}

// TestBlipsHoursApartDoNotKill: three 2 s auth blips, hours apart, on the
// batch path are three episodes, none of which lasts: the key lives.
func TestBlipsHoursApartDoNotKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		for i := range 3 {
			w.sim.SetKeyStatus("batch", sim.KeyRevoked)
			time.AfterFunc(2*time.Second, func() { w.sim.SetKeyStatus("batch", sim.KeyActive) })
			w.journal = fmt.Sprintf("%s.%d", w.journal, i)
			reqs := requests(10)
			if _, _, err := w.run(t, w.config(), reqs, nil, nil); err != nil {
				t.Fatal(err)
			}
			t.Logf("after blip %d: suspect=%v", i, w.key(t, "batch").Suspect(keys.AllPools))
			time.Sleep(2 * time.Hour)
		}
		if dead, why := w.key(t, "batch").Dead(); dead {
			t.Errorf("three 2 s blips hours apart killed the key: %s", why)
		}
	})
}

// TestRotationFinishesBatchesInFlight: the org's only key is retired
// mid-run and a key of the same org joins 2 s later. The batches in flight
// are polled and harvested to the end (by the retired key, then the new
// one), none is given up, nothing is re-routed to sync (paid twice).
func TestRotationFinishesBatchesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, nil, "batch")
		reqs := requests(30)
		cfg := w.config()
		col, r, err := w.runWith(t, newCollector(t), cfg, reqs, nil, nil, func(r *Runner) {
			go func() {
				time.Sleep(3 * time.Second)
				old := w.key(t, "batch")
				old.Retire()
				time.Sleep(2 * time.Second)
				p, _ := keys.Load(keys.LoadOptions{NoDotEnv: true, Env: keys.EnvMap(map[string]string{keys.EnvBatch: sim.FakeKeyBatch})})
				nk := p.Keys()[0]
				nk.SetOrg(old.Org())
				r.AddKeys(t.Context(), []*keys.Key{nk})
			}()
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("results %d reroutes %d stats %+v created %d", len(col.results), len(col.reroutes), r.Stats(), w.sim.Stats().Orgs["batch"].Batches.Created)
		if len(col.reroutes) != 0 || r.Stats().GivenUp != 0 {
			t.Errorf("%d requests re-routed to sync, %d batches given up, because a key was rotated", len(col.reroutes), r.Stats().GivenUp)
		}
		checkAllOK(t, reqs, col)
	})
}
