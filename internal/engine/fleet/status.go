package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/api"
	"github.com/sluice-dev/sluice/internal/engine/budget"
)

// MemberInfo is what a member says about itself in member-info.
type MemberInfo struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Job is the job the member works for (Config.Job); empty: its own.
	Job string `json:"job,omitempty"`
	// Label describes its work (the command and input).
	Label   string    `json:"label,omitempty"`
	Started time.Time `json:"started"`
}

// Member is one live member in a Report.
type Member struct {
	ID string `json:"id"`
	MemberInfo
	// ExpiresIn is how long its lease runs without a renewal.
	ExpiresIn time.Duration `json:"expires_in_ns"`
}

// LaneStatus is one lane's shared budget in a Report.
type LaneStatus struct {
	Org  string   `json:"org"`
	Pool api.Pool `json:"pool"`
	Cap  int      `json:"cap"`
	// InUse is the permits held by live members, Held the same by member.
	InUse int            `json:"in_use"`
	Held  map[string]int `json:"held"`
	// Active are the live members that asked for a permit within the
	// active window (as of now), ActiveJobs their jobs: what the fair share
	// divides the cap between. A member's job is its id unless it named one.
	Active     []string                           `json:"active"`
	ActiveJobs []string                           `json:"active_jobs"`
	Buckets    [budget.NumDims]budget.BucketState `json:"buckets"`
}

// Report is a fleet's state at one instant of Redis's clock.
type Report struct {
	Redis   string       `json:"redis"` // HOST:PORT/DB
	Now     time.Time    `json:"now"`
	Members []Member     `json:"members"`
	Lanes   []LaneStatus `json:"lanes"`
}

// ReadStatus reads the fleet at url. It changes nothing: dead members
// still in Redis are left out of the report, not pruned.
func ReadStatus(ctx context.Context, url string) (Report, error) {
	rdb, addr, err := newClient(url, 2*time.Second)
	if err != nil {
		return Report{}, err
	}
	defer rdb.Close()
	rep, err := readStatus(ctx, rdb)
	rep.Redis = addr
	if err != nil {
		return rep, fmt.Errorf("fleet: reading %s: %w", addr, err)
	}
	return rep, nil
}

func readStatus(ctx context.Context, rdb *redis.Client) (Report, error) {
	var rep Report
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return rep, err
	}
	rep.Now = now.UTC()
	nowUS := float64(now.UnixMicro())
	zs, err := rdb.ZRangeWithScores(ctx, keyMembers, 0, -1).Result()
	if err != nil {
		return rep, err
	}
	infos, err := rdb.HGetAll(ctx, keyMemberInfo).Result()
	if err != nil {
		return rep, err
	}
	live := map[string]bool{}
	for _, z := range zs {
		id := z.Member.(string)
		if z.Score < nowUS {
			continue
		}
		live[id] = true
		m := Member{ID: id, ExpiresIn: time.Duration(z.Score-nowUS) * time.Microsecond}
		json.Unmarshal([]byte(infos[id]), &m.MemberInfo)
		rep.Members = append(rep.Members, m)
	}
	jobOf, err := rdb.HGetAll(ctx, keyMemberJob).Result()
	if err != nil {
		return rep, err
	}
	names, err := rdb.SMembers(ctx, keyLanes).Result()
	if err != nil {
		return rep, err
	}
	sort.Strings(names)
	for _, name := range names {
		org, pool, _ := strings.Cut(name, "|")
		k := laneKeys(name)
		st, err := rdb.HGetAll(ctx, k[kState]).Result()
		if err != nil {
			return rep, err
		}
		held, err := rdb.HGetAll(ctx, k[kHeld]).Result()
		if err != nil {
			return rep, err
		}
		active, err := rdb.ZRangeWithScores(ctx, k[kActive], 0, -1).Result()
		if err != nil {
			return rep, err
		}
		ls := LaneStatus{Org: org, Pool: api.Pool(pool), Held: map[string]int{}}
		ls.Cap, _ = strconv.Atoi(st["cap"])
		window, err := strconv.ParseFloat(st["window"], 64)
		if err != nil {
			window = float64(time.Second.Microseconds()) // the default
		}
		for m, v := range held {
			n, _ := strconv.Atoi(v)
			if live[m] && n > 0 {
				ls.Held[m] = n
				ls.InUse += n
			}
		}
		jobs := map[string]bool{}
		for _, z := range active {
			m := z.Member.(string)
			if live[m] && z.Score >= nowUS-window {
				ls.Active = append(ls.Active, m)
				j := jobOf[m]
				if j == "" {
					j = m
				}
				if !jobs[j] {
					jobs[j] = true
					ls.ActiveJobs = append(ls.ActiveJobs, j)
				}
			}
		}
		sort.Strings(ls.ActiveJobs)
		for i, d := range []string{"r", "i", "o"} {
			lim, err1 := strconv.ParseFloat(st[d+"l"], 64)
			lvl, err2 := strconv.ParseFloat(st[d+"v"], 64)
			at, err3 := strconv.ParseFloat(st[d+"t"], 64)
			b := budget.BucketState{Fraction: 1}
			if err1 == nil && err2 == nil && err3 == nil && lim > 0 {
				if nowUS > at {
					lvl = math.Min(lim, lvl+(nowUS-at)/1e6*lim/60)
				}
				b = budget.BucketState{Known: true, Limit: lim, Level: lvl, Fraction: math.Max(0, lvl/lim)}
			}
			ls.Buckets[i] = b
		}
		rep.Lanes = append(rep.Lanes, ls)
	}
	return rep, nil
}

// Print writes the report as `sluice fleet status` shows it.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "fleet at redis %s, %s: %d member(s)\n\n", r.Redis, r.Now.Format(time.RFC3339), len(r.Members))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(r.Members) > 0 {
		fmt.Fprintln(tw, "MEMBER\tJOB\tWORK\tSTARTED\tLEASE")
		for _, m := range r.Members {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.ID, orDash(m.Job), orDash(m.Label), m.Started.Format(time.RFC3339), m.ExpiresIn.Round(100*time.Millisecond))
		}
		fmt.Fprintln(tw)
	}
	if len(r.Lanes) == 0 {
		fmt.Fprintln(tw, "no lanes yet")
	} else {
		fmt.Fprintln(tw, "ORG\tPOOL\tPERMITS\tACTIVE JOBS\tRPM\tITPM\tOTPM")
		for _, l := range r.Lanes {
			fmt.Fprintf(tw, "%s\t%s\t%d / %d\t%d\t%s\t%s\t%s\n", l.Org, l.Pool, l.InUse, l.Cap, len(l.ActiveJobs),
				bucketText(l.Buckets[0]), bucketText(l.Buckets[1]), bucketText(l.Buckets[2]))
		}
	}
	tw.Flush()
}

func bucketText(b budget.BucketState) string {
	if !b.Known {
		return "unknown"
	}
	return fmt.Sprintf("%.0f / %.0f (%.0f%%)", b.Level, b.Limit, 100*b.Fraction)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
