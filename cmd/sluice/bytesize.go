package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag of a number of bytes: 1073741824, 1GiB, 512MiB,
// 64KiB (or KB, MB, GB: powers of 1000).
type byteSize int64

var byteUnits = []struct {
	suffix string
	n      int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

func (b *byteSize) Set(s string) error {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if strings.HasSuffix(strings.ToUpper(t), strings.ToUpper(u.suffix)) && len(t) > len(u.suffix) {
			mult, t = u.n, strings.TrimSpace(t[:len(t)-len(u.suffix)])
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 || f*float64(mult) > 1<<62 {
		return fmt.Errorf("%q is not a size (e.g. 1GiB, 512MiB, 1073741824)", s)
	}
	*b = byteSize(f * float64(mult))
	return nil
}

func (b *byteSize) String() string {
	n := int64(*b)
	for i := 3; i >= 0; i-- { // the largest binary unit that divides it
		if u := byteUnits[i]; n > 0 && n%u.n == 0 {
			return fmt.Sprintf("%d%s", n/u.n, u.suffix)
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Type() string { return "size" }
