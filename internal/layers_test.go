// Package internal_test checks the module's shape that docs/design.md
// draws: the groups' import order, and a promised API that names no
// internal type.
package internal_test

import (
	"go/importer"
	"go/token"
	"go/types"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sluice-dev/sluice/"

// promised are the packages at the module's root (README, "Go API").
var promised = []string{"api", "apimodel", "call", "dispatch", "job", "judge", "judgejob", "keys", "proxy", "sim"}

// rank orders the groups bottom-up, as docs/design.md lists them: a
// package may import its own group and groups of a lower rank.
func rank(path string) (string, int) {
	p := strings.TrimPrefix(path, module)
	for _, g := range []struct {
		prefix string
		rank   int
	}{
		{"internal/store/", 1}, {"internal/format/", 2}, {"internal/engine/", 3}, {"internal/decide/", 4},
		{"internal/front/", 5}, {"internal/see/", 6},
		{"internal/bench", 8}, {"internal/profiling", 8}, {"internal/testkit/", 8}, {"cmd/", 9},
	} {
		if strings.HasPrefix(p, g.prefix) {
			return strings.TrimSuffix(g.prefix, "/"), g.rank
		}
	}
	switch strings.Split(p, "/")[0] {
	case "dispatch", "job", "judgejob", "proxy":
		return "the front doors", 7
	}
	return "the root's vocabulary", 0
}

// The two imports up the order that docs/design.md names.
var allowedUp = map[string]bool{
	"internal/front/job -> dispatch":               true,
	"internal/front/proxy -> internal/see/metrics": true,
}

func TestGroupsImportDownward(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		from, fromRank := rank(f[0])
		for _, imp := range f[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to, toRank := rank(imp)
			edge := strings.TrimPrefix(f[0], module) + " -> " + strings.TrimPrefix(imp, module)
			if toRank > fromRank && !allowedUp[edge] {
				t.Errorf("%s: %s imports %s, a group above it", edge, from, to)
			}
		}
	}
}

// Every exported name of a promised package — functions, variables,
// types, their exported fields and methods — mentions only promised
// packages of the module.
func TestPromisedAPINamesNoInternalType(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks ten packages from source")
	}
	imp := importer.ForCompiler(token.NewFileSet(), "source", nil).(types.ImporterFrom)
	for _, name := range promised {
		pkg, err := imp.ImportFrom(module+name, ".", 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		check := func(what string, typ types.Type) {
			bad := ""
			types.TypeString(typ, func(other *types.Package) string {
				if p, ok := strings.CutPrefix(other.Path(), module); ok && strings.HasPrefix(p, "internal/") {
					bad = p
				}
				return other.Name()
			})
			if bad != "" {
				t.Errorf("%s.%s names %s", name, what, bad)
			}
		}
		scope := pkg.Scope()
		for _, n := range scope.Names() {
			obj := scope.Lookup(n)
			if !obj.Exported() {
				continue
			}
			tn, ok := obj.(*types.TypeName)
			if !ok {
				check(n, obj.Type())
				continue
			}
			if tn.IsAlias() {
				check(n, types.Unalias(tn.Type()))
				continue
			}
			if st, ok := tn.Type().Underlying().(*types.Struct); ok {
				for i := range st.NumFields() {
					if f := st.Field(i); f.Exported() {
						check(n+"."+f.Name(), f.Type())
					}
				}
			} else {
				check(n, tn.Type().Underlying())
			}
			for m := range types.NewMethodSet(types.NewPointer(tn.Type())).Methods() {
				if m.Obj().Exported() {
					check(n+"."+m.Obj().Name(), m.Type())
				}
			}
		}
	}
}
