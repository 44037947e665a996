package apimodel_test

import (
	"fmt"

	"github.com/sluice-dev/sluice/apimodel"
)

// Limits are per-minute limits of one organization × model pool; Within
// gives the tighter of two (a workspace's limits inside its
// organization's: a zero field is no limit).
func ExampleLimits_Within() {
	org := apimodel.Limits{RPM: 4000, ITPM: 2_000_000, OTPM: 400_000}
	ws := apimodel.Limits{RPM: 1000}
	fmt.Printf("%+v\n", ws.Within(&org))
	// Output: {RPM:1000 ITPM:2000000 OTPM:400000}
}
