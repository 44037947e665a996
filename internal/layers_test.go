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

// The shipped binary is the product: `sluice` carries no benchmark, test
// kit or the testing package (cmd/sluice-bench carries the benchmarks).
func TestShippedBinaryCarriesNoBenchmarkOrTestKit(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"cmd/sluice").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		rest := strings.TrimPrefix(dep, module)
		if dep == "testing" || strings.HasPrefix(rest, "internal/bench") || strings.HasPrefix(rest, "internal/testkit/") {
			t.Errorf("cmd/sluice depends on %s", dep)
		}
	}
}

// Every type a caller of a promised package can reach — through exported
// functions, variables, constants, types, their exported or embedded
// fields, their methods, and unexported types those lead to — belongs to a
// promised package (or the standard library, or a dependency).
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
		seen := map[types.Type]bool{}
		var visit func(where string, typ types.Type)
		visit = func(where string, typ types.Type) {
			typ = types.Unalias(typ)
			if seen[typ] {
				return
			}
			seen[typ] = true
			switch tt := typ.(type) {
			case *types.Named:
				if p := tt.Obj().Pkg(); p != nil {
					if rest, ok := strings.CutPrefix(p.Path(), module); ok && strings.HasPrefix(rest, "internal/") {
						t.Errorf("%s.%s reaches %s.%s", name, where, rest, tt.Obj().Name())
						return
					}
					if !strings.HasPrefix(p.Path(), module) {
						return // the standard library's or a dependency's
					}
				}
				for i := range tt.TypeArgs().Len() {
					visit(where, tt.TypeArgs().At(i))
				}
				for i := range tt.TypeParams().Len() {
					visit(where, tt.TypeParams().At(i).Constraint())
				}
				for m := range types.NewMethodSet(types.NewPointer(tt)).Methods() {
					if m.Obj().Exported() {
						visit(where+"."+m.Obj().Name(), m.Type())
					}
				}
				visit(where, tt.Underlying())
			case *types.Struct:
				for i := range tt.NumFields() {
					if f := tt.Field(i); f.Exported() || f.Embedded() {
						visit(where+"."+f.Name(), f.Type())
					}
				}
			case *types.Interface:
				for m := range tt.Methods() {
					if m.Exported() {
						visit(where+"."+m.Name(), m.Type())
					}
				}
				for e := range tt.EmbeddedTypes() {
					visit(where, e)
				}
			case *types.Signature:
				for i := range tt.TypeParams().Len() {
					visit(where, tt.TypeParams().At(i).Constraint())
				}
				for v := range tt.Params().Variables() {
					visit(where, v.Type())
				}
				for v := range tt.Results().Variables() {
					visit(where, v.Type())
				}
			case *types.Pointer:
				visit(where, tt.Elem())
			case *types.Slice:
				visit(where, tt.Elem())
			case *types.Array:
				visit(where, tt.Elem())
			case *types.Map:
				visit(where, tt.Key())
				visit(where, tt.Elem())
			case *types.Chan:
				visit(where, tt.Elem())
			}
		}
		scope := pkg.Scope()
		for _, n := range scope.Names() {
			if obj := scope.Lookup(n); obj.Exported() {
				visit(n, obj.Type())
			}
		}
	}
}
