package api

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"sync/atomic"
)

// The catalog is data (docs/models.md): models.json, embedded, gives every
// model sluice knows and the rules of every API version it knows, each with
// its source and the date it was read; overlay files of the same schema
// correct or extend it without a release (LoadCatalog).

//go:embed models.json
var builtinJSON []byte

// BuiltinOrigin is the Origin of an entry the overlay files did not change.
const BuiltinOrigin = "built-in"

// VersionRules is what one API version refuses for every model.
type VersionRules struct {
	Version string `json:"version"`
	// Sampling is the version's rule for temperature, top_p and top_k.
	Sampling Sampling `json:"sampling,omitempty"`
	// AssistantDocuments false: a document block in an assistant message
	// is refused. UserCitations false: a non-empty citations field on a
	// text block of a user message is refused. Absent: allowed.
	AssistantDocuments *bool  `json:"assistant_documents,omitempty"`
	UserCitations      *bool  `json:"user_citations,omitempty"`
	Source             string `json:"source"`
	Read               string `json:"read"`
	Note               string `json:"note,omitempty"`
	Origin             string `json:"-"`
}

// Rules are what the API refuses for one (API version, model): the
// checks input validation applies before anything is sent.
type Rules struct {
	Version string
	// Sampling is the stricter of the version's and the model's rule;
	// SamplingBy names the one that set it ("API version 2026-10-21",
	// "claude-sonnet-5").
	Sampling   Sampling
	SamplingBy string
	// NoAssistantDocuments and NoUserCitations: refused by the version.
	NoAssistantDocuments, NoUserCitations bool
	// KnownVersion is false for a version the catalog has no entry for:
	// only the model's rules apply.
	KnownVersion bool
}

// Catalog is one effective model catalog: the built-in file with any
// overlays applied. It is immutable once built.
type Catalog struct {
	models   []ModelInfo
	byName   map[string]int
	versions []VersionRules
	// Overlays are the files applied, in order.
	Overlays []string
}

// catalogFile is the schema of models.json and of an overlay.
type catalogFile struct {
	Schema   int               `json:"schema"`
	Note     string            `json:"note,omitempty"`
	Versions []VersionRules    `json:"versions"`
	Models   []json.RawMessage `json:"models"`
}

// modelEntry is one model of the file.
type modelEntry struct {
	ID                  string              `json:"id"`
	Aliases             []string            `json:"aliases,omitempty"`
	DisplayName         string              `json:"display_name,omitempty"`
	Family              Family              `json:"family"`
	Pool                Pool                `json:"pool"`
	CreatedAt           string              `json:"created_at,omitempty"`
	Prices              *Prices             `json:"prices,omitempty"`
	LongContext         *LongContext        `json:"long_context,omitempty"`
	BatchDiscount       *float64            `json:"batch_discount,omitempty"`
	MinCacheable        int                 `json:"min_cacheable,omitempty"`
	MinCacheableSeen    int                 `json:"min_cacheable_seen,omitempty"`
	MaxOutput           int                 `json:"max_output,omitempty"`
	Sampling            map[string]Sampling `json:"sampling,omitempty"`
	CacheReadsCountITPM bool                `json:"cache_reads_count_itpm,omitempty"`
	Source              string              `json:"source"`
	Read                string              `json:"read"`
	Note                string              `json:"note,omitempty"`
}

var builtin = func() *Catalog {
	c, err := buildCatalog(nil)
	if err != nil {
		panic("api: the built-in models.json is invalid: " + err.Error())
	}
	return c
}()

var current atomic.Pointer[Catalog]

func init() { current.Store(builtin) }

// Current returns the process's effective catalog.
func Current() *Catalog { return current.Load() }

// Builtin returns the catalog of the embedded file alone.
func Builtin() *Catalog { return builtin }

// SetCatalog makes c the process's effective catalog (at start, before any
// request is priced or sent) and returns a func that restores the previous
// one (tests).
func SetCatalog(c *Catalog) (restore func()) {
	prev := current.Swap(c)
	return func() { current.Store(prev) }
}

// LoadCatalog builds the built-in catalog with the overlay files at paths
// applied in order (empty paths are skipped). An error names the file, and
// the entry and field or the line where it is wrong.
func LoadCatalog(paths ...string) (*Catalog, error) {
	var overlays []overlay
	for _, p := range paths {
		if p == "" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("models: %w", err)
		}
		overlays = append(overlays, overlay{path: p, data: b})
	}
	return buildCatalog(overlays)
}

type overlay struct {
	path string
	data []byte
}

// buildCatalog merges the built-in file and the overlays: a model entry
// whose id is already present is corrected field by field (the fields the
// overlay gives replace the earlier ones; prices and long_context key by
// key), and must give its own source and read date; another adds a model,
// with every price class if it gives prices; a versions entry replaces
// the one of its version or adds one.
func buildCatalog(overlays []overlay) (*Catalog, error) {
	base, err := decodeFile("models.json (built-in)", builtinJSON)
	if err != nil {
		return nil, err
	}
	type raw struct {
		fields map[string]json.RawMessage
		origin string
	}
	var order []string
	entries := map[string]*raw{}
	add := func(file string, i int, m json.RawMessage) error {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(m, &fields); err != nil {
			return fmt.Errorf("%s: models[%d]: %v", file, i, err)
		}
		var id string
		if err := json.Unmarshal(fields["id"], &id); err != nil || id == "" {
			return fmt.Errorf("%s: models[%d]: id: required, a non-empty string", file, i)
		}
		e, ok := entries[id]
		if !ok {
			e = &raw{fields: map[string]json.RawMessage{}}
			entries[id] = e
			order = append(order, id)
		} else if fields["source"] == nil || fields["read"] == nil {
			// A correction cites its own source: the earlier entry's
			// would be cited for figures it never gave.
			return fmt.Errorf("%s: model %q: source and read: required in a correction too (where its figures were read, and when)", file, id)
		}
		for k, v := range fields {
			if old, ok := e.fields[k]; ok && mergedObjects[k] {
				m, err := mergeObject(old, v)
				if err != nil {
					return fmt.Errorf("%s: model %q: %s: %v", file, id, k, err)
				}
				v = m
			}
			e.fields[k] = v
		}
		e.origin = file
		return nil
	}
	versions := append([]VersionRules(nil), base.Versions...)
	for i := range versions {
		versions[i].Origin = BuiltinOrigin
	}
	for i, m := range base.Models {
		if err := add(BuiltinOrigin, i, m); err != nil {
			return nil, err
		}
	}
	c := &Catalog{byName: map[string]int{}}
	for _, o := range overlays {
		f, err := decodeFile(o.path, o.data)
		if err != nil {
			return nil, err
		}
		for i, m := range f.Models {
			if err := add(o.path, i, m); err != nil {
				return nil, err
			}
		}
		for _, v := range f.Versions {
			v.Origin = o.path
			if j := slices.IndexFunc(versions, func(w VersionRules) bool { return w.Version == v.Version }); j >= 0 {
				versions[j] = v
			} else {
				versions = append(versions, v)
			}
		}
		c.Overlays = append(c.Overlays, o.path)
	}
	for _, v := range versions {
		if err := v.check(); err != nil {
			return nil, fmt.Errorf("%s: versions %q: %v", v.Origin, v.Version, err)
		}
	}
	c.versions = versions
	for _, id := range order {
		e := entries[id]
		merged, _ := json.Marshal(e.fields)
		if err := allPrices(e.fields["prices"]); err != nil {
			return nil, fmt.Errorf("%s: model %q: %v", e.origin, id, err)
		}
		var me modelEntry
		dec := json.NewDecoder(bytes.NewReader(merged))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&me); err != nil {
			return nil, fmt.Errorf("%s: model %q: %v", e.origin, id, fieldError(err))
		}
		info, err := me.info(e.origin)
		if err != nil {
			return nil, fmt.Errorf("%s: model %q: %v", e.origin, id, err)
		}
		for _, name := range append([]string{info.ID}, info.Aliases...) {
			if j, dup := c.byName[name]; dup {
				return nil, fmt.Errorf("%s: model %q: %q is already the id or an alias of %q", e.origin, id, name, c.models[j].ID)
			}
			c.byName[name] = len(c.models)
		}
		c.models = append(c.models, info)
	}
	return c, nil
}

// mergedObjects are the fields of a model entry a correction merges key
// by key into the earlier entry's (prices, long_context): a correction of
// one price leaves the others, never makes them 0. Other fields are
// replaced whole.
var mergedObjects = map[string]bool{"prices": true, "long_context": true}

// mergeObject returns the JSON object old with next's keys set over it;
// next null replaces it (no object).
func mergeObject(old, next json.RawMessage) (json.RawMessage, error) {
	if bytes.Equal(bytes.TrimSpace(next), []byte("null")) || bytes.Equal(bytes.TrimSpace(old), []byte("null")) {
		return next, nil
	}
	var o, n map[string]json.RawMessage
	if err := json.Unmarshal(old, &o); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(next, &n); err != nil {
		return nil, fmt.Errorf("want an object: %v", err)
	}
	for k, v := range n {
		o[k] = v
	}
	return json.Marshal(o)
}

// priceClasses are the keys every prices object needs, once merged.
var priceClasses = []string{"input", "cache_write_5m", "cache_write_1h", "cache_read", "output"}

// allPrices checks that a model's merged prices give every class: a
// missing class would be priced 0, billed work recorded as free.
func allPrices(p json.RawMessage) error {
	if p == nil || bytes.Equal(bytes.TrimSpace(p), []byte("null")) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(p, &m); err != nil {
		return nil // the decode reports the type
	}
	var missing []string
	for _, k := range priceClasses {
		if _, ok := m[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("prices: %v missing: a model's prices give every class (%v), or a missing one would be billed as free", missing, priceClasses)
	}
	return nil
}

// decodeFile reads the top level of a catalog file; a syntax error names
// its line.
func decodeFile(name string, data []byte) (catalogFile, error) {
	var f catalogFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return f, fmt.Errorf("%s: line %d: %v", name, 1+bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n")), err)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return f, fmt.Errorf("%s: line %d: %s: want %s, got %s", name, 1+bytes.Count(data[:min(int(te.Offset), len(data))], []byte("\n")), te.Field, te.Type, te.Value)
		}
		return f, fmt.Errorf("%s: %v", name, fieldError(err))
	}
	if f.Schema != 1 {
		return f, fmt.Errorf("%s: schema: %d is not a schema this sluice reads (want 1)", name, f.Schema)
	}
	return f, nil
}

var unknownFieldRE = regexp.MustCompile(`unknown field "([^"]+)"`)

// fieldError rewords encoding/json's errors to name the field.
func fieldError(err error) error {
	if m := unknownFieldRE.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("%s: not a field of the schema (docs/models.md)", m[1])
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("%s: want %s, got %s", te.Field, te.Type, te.Value)
	}
	return err
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func (s Sampling) valid() bool {
	switch s {
	case SamplingAny, SamplingDefaultOnly, SamplingRefused:
		return true
	}
	return false
}

func (v VersionRules) check() error {
	if v.Version == "" {
		return errors.New("version: required")
	}
	if v.Sampling != "" && !v.Sampling.valid() {
		return fmt.Errorf("sampling: %q is not any, default_only or refused", v.Sampling)
	}
	if v.Source == "" || v.Read == "" {
		return errors.New("source and read: required (where the rule was read, and when)")
	}
	return nil
}

// info checks e and turns it into a ModelInfo.
func (e modelEntry) info(origin string) (ModelInfo, error) {
	if !slices.Contains(Families, e.Family) {
		return ModelInfo{}, fmt.Errorf("family: %q is not one of sonnet, haiku, opus, fable, unknown", e.Family)
	}
	if e.Pool == "" {
		return ModelInfo{}, errors.New("pool: required")
	}
	if e.Source == "" || e.Read == "" {
		return ModelInfo{}, errors.New("source and read: required (where the entry was read, and when)")
	}
	m := ModelInfo{ID: e.ID, Aliases: e.Aliases, DisplayName: e.DisplayName, Pool: e.Pool, Family: e.Family,
		MinCacheable: e.MinCacheable, MinCacheableSeen: e.MinCacheableSeen, MaxOutput: e.MaxOutput, CreatedAt: e.CreatedAt,
		CacheReadsCountITPM: e.CacheReadsCountITPM, Sampling: e.Sampling, Source: e.Source, Read: e.Read, Origin: origin, Note: e.Note,
		BatchDiscount: BatchDiscount}
	if m.DisplayName == "" {
		m.DisplayName = m.ID
	}
	if p := e.Prices; p != nil {
		for name, x := range map[string]float64{"input": p.Input, "cache_write_5m": p.CacheWrite5m, "cache_write_1h": p.CacheWrite1h, "cache_read": p.CacheRead, "output": p.Output} {
			if !finite(x) || x < 0 {
				return ModelInfo{}, fmt.Errorf("prices.%s: %v is not a price (a finite number ≥ 0)", name, x)
			}
		}
		m.Prices, m.Priced = *p, true
	}
	if lc := e.LongContext; lc != nil {
		if lc.Threshold <= 0 {
			return ModelInfo{}, fmt.Errorf("long_context.threshold: %d must be > 0", lc.Threshold)
		}
		if !finite(lc.Multiplier) || lc.Multiplier < 1 {
			return ModelInfo{}, fmt.Errorf("long_context.multiplier: %v must be a finite number ≥ 1", lc.Multiplier)
		}
		switch lc.Measure {
		case "":
			l := *lc
			l.Measure = MeasurePrompt
			lc = &l
		case MeasurePrompt, MeasureInput:
		default:
			return ModelInfo{}, fmt.Errorf("long_context.measure: %q is not prompt or input", lc.Measure)
		}
		m.LongContext = lc
	}
	if d := e.BatchDiscount; d != nil {
		if !finite(*d) || *d <= 0 || *d > 1 {
			return ModelInfo{}, fmt.Errorf("batch_discount: %v must be in (0, 1]", *d)
		}
		m.BatchDiscount = *d
	}
	if e.MinCacheable < 0 || e.MinCacheableSeen < 0 || e.MaxOutput < 0 {
		return ModelInfo{}, errors.New("min_cacheable, min_cacheable_seen, max_output: must not be negative")
	}
	for v, s := range e.Sampling {
		if !s.valid() {
			return ModelInfo{}, fmt.Errorf("sampling[%q]: %q is not any, default_only or refused", v, s)
		}
	}
	return m, nil
}

// Lookup returns the entry for a model id or alias.
func (c *Catalog) Lookup(name string) (ModelInfo, bool) {
	i, ok := c.byName[name]
	if !ok {
		return ModelInfo{}, false
	}
	return c.models[i], true
}

// Models returns every entry, in the file's order (overlay additions
// last). The slice is a copy.
func (c *Catalog) Models() []ModelInfo { return append([]ModelInfo(nil), c.models...) }

// Versions returns the rules of every API version the catalog knows.
func (c *Catalog) Versions() []VersionRules { return append([]VersionRules(nil), c.versions...) }

// Version returns the rules of one API version.
func (c *Catalog) Version(v string) (VersionRules, bool) {
	i := slices.IndexFunc(c.versions, func(w VersionRules) bool { return w.Version == v })
	if i < 0 {
		return VersionRules{}, false
	}
	return c.versions[i], true
}

// Rules returns what the API refuses for a request of model (an id or
// alias, known or not) sent with API version v.
func (c *Catalog) Rules(v, model string) Rules {
	r := Rules{Version: v, Sampling: SamplingAny}
	if vr, ok := c.Version(v); ok {
		r.KnownVersion = true
		if vr.Sampling.rank() > r.Sampling.rank() {
			r.Sampling, r.SamplingBy = vr.Sampling, "API version "+v
		}
		r.NoAssistantDocuments = vr.AssistantDocuments != nil && !*vr.AssistantDocuments
		r.NoUserCitations = vr.UserCitations != nil && !*vr.UserCitations
	}
	if m, ok := c.Lookup(model); ok {
		s, ok := m.Sampling[v]
		if !ok {
			s = m.Sampling["*"]
		}
		if s.rank() > r.Sampling.rank() {
			r.Sampling, r.SamplingBy = s, m.ID
		}
	}
	return r
}
