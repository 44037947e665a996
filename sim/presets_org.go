package sim

import "github.com/sluice-dev/sluice/api"

// PresetOrgWide is a world whose organization has a limit on its usage
// across all models (the rate-limits page's "Organization (all API usage)"
// table, 2026-10, values not published: docs/models.md) that binds a job
// of two models before either model's pool does.
const PresetOrgWide = "org-wide"

func init() {
	presets[PresetOrgWide] = struct {
		make func() Config
		note string
	}{orgWide, "one Scale-tier org whose limit across all models (6,000 RPM) binds before its pools' (10,000 RPM each)"}
}

func orgWide() Config {
	c := tier("scale-org", Limits{RPM: 10_000, ITPM: 10_000_000, OTPM: 2_000_000},
		Limits{RPM: 10_000, ITPM: 10_000_000, OTPM: 2_000_000}, Limits{RPM: 10_000, ITPM: 10_000_000, OTPM: 2_000_000},
		Limits{RPM: 10_000, ITPM: 10_000_000, OTPM: 2_000_000}, 20_000, 4_000, 500_000)
	c.Orgs[0].OrgLimits = &Limits{RPM: 6_000, ITPM: 6_000_000, OTPM: 1_200_000}
	c.Orgs[0].Limits[api.PoolSonnet5] = Limits{RPM: 10_000, ITPM: 10_000_000, OTPM: 2_000_000}
	return c
}
