package simulation

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeagent/nodeagent/pkg/node"
)

const module = "github.com/nodeagent/nodeagent/"

// loopPackages hold the per-node loops; only pkg/node may compose them. (pkg/lease may be imported
// for the process's one ServingProbe; loopConstructors keeps its Renewer out.)
var loopPackages = []string{
	module + "pkg/statussync", module + "pkg/registration",
	"k8s.io/component-helpers/apimachinery/lease",
}

// loopConstructors build a loop or its pieces: the simulation must get them from node.New only.
var loopConstructors = map[string][]string{
	module + "pkg/statussync":   {"New", "Syncer"},
	module + "pkg/lease":        {"New", "Renewer"},
	module + "pkg/registration": {"New", "Registrar"},
	module + "pkg/criruntime":   {"NewPoller", "Poller", "NewState", "State"},
	module + "pkg/nodestatus": {"NewFuncs", "NodeAddress", "MachineInfo", "VersionInfo", "DaemonEndpoints", "Images", "GoRuntime",
		"RuntimeHandlers", "NodeFeatures", "MemoryPressureCondition", "DiskPressureCondition", "PIDPressureCondition", "ReadyCondition", "SchedulableEvent"},
}

// TestNoSecondCopyOfTheLoops is the check that the simulation runs the agent's own per-node loops:
// pkg/simulation does not import the packages of the loops (statussync, lease, registration), neither
// it nor the simulate command names their constructors, the CRI poller or the kubelet's setters, and
// the Simulator's Nodes are node.Controllers built by node.New.
func TestNoSecondCopyOfTheLoops(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return strings.HasSuffix(f, "_test.go") })
	callsNodeNew := false
	for _, f := range files {
		imports, uses := parseUses(t, f)
		for _, imp := range imports {
			if slices.Contains(loopPackages, imp) {
				t.Errorf("%s imports %s: the simulation must get the loops from pkg/node", f, imp)
			}
		}
		checkUses(t, f, uses)
		callsNodeNew = callsNodeNew || slices.Contains(uses, module+"pkg/node.New")
	}
	if !callsNodeNew {
		t.Error("pkg/simulation does not call node.New")
	}
	_, uses := parseUses(t, filepath.Join("..", "..", "internal", "app", "simulate.go"))
	checkUses(t, "internal/app/simulate.go", uses)

	// The Controller of a simulated Node is the agent's type.
	var s Simulator
	if got := reflect.TypeOf(s.Controller); got.Out(0) != reflect.TypeOf(&node.Controller{}) {
		t.Errorf("Simulator.Controller returns %v, want *node.Controller", got.Out(0))
	}
}

// parseUses returns a file's imports and the package-qualified identifiers it uses ("path.Name").
func parseUses(t *testing.T, path string) (imports, uses []string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		imports = append(imports, p)
		name := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = p
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && names[id.Name] != "" {
				uses = append(uses, names[id.Name]+"."+sel.Sel.Name)
			}
		}
		return true
	})
	return imports, uses
}

func checkUses(t *testing.T, file string, uses []string) {
	t.Helper()
	for pkg, idents := range loopConstructors {
		for _, id := range idents {
			if slices.Contains(uses, pkg+"."+id) {
				t.Errorf("%s uses %s.%s: the simulation must get the loops from node.New", file, pkg, id)
			}
		}
	}
}
