package deploy

import (
	"debug/elf"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	// Cmd is the instruction upper-cased: FROM, RUN, COPY...
	Cmd string
	// Rest is everything after it, whitespace-trimmed.
	Rest string
}

// stage is one FROM and the instructions up to the next.
type stage struct {
	// From is the base image, global ARG defaults substituted.
	From string
	// Name is the AS name, or "".
	Name         string
	Instructions []instruction
}

// last returns the Rest of the stage's last cmd instruction, or "".
func (s stage) last(cmd string) string {
	for i := len(s.Instructions) - 1; i >= 0; i-- {
		if s.Instructions[i].Cmd == cmd {
			return s.Instructions[i].Rest
		}
	}
	return ""
}

// all returns the Rest of every cmd instruction of the stage.
func (s stage) all(cmd string) []string {
	var out []string
	for _, in := range s.Instructions {
		if in.Cmd == cmd {
			out = append(out, in.Rest)
		}
	}
	return out
}

type dockerfile struct {
	// Args are the global ARG defaults, declared before the first FROM.
	Args   map[string]string
	stages []stage
}

var argRefRE = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

// parseDockerfileText splits a Dockerfile into stages of instructions. It
// joins lines ending in a backslash, drops comments and blank lines (also
// inside a continuation, as Docker does), and substitutes global ARG
// defaults into FROM. It knows no escape directive or heredoc, which the
// project's Dockerfile does not use.
func parseDockerfileText(text string) (dockerfile, error) {
	df := dockerfile{Args: map[string]string{}}
	var logical []string
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body)
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(trimmed)
		logical = append(logical, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		return df, fmt.Errorf("continuation at end of file: %q", cur.String())
	}
	for _, l := range logical {
		cmd, rest, _ := strings.Cut(l, " ")
		in := instruction{Cmd: strings.ToUpper(cmd), Rest: strings.Join(strings.Fields(rest), " ")}
		switch {
		case in.Cmd == "FROM":
			fields := strings.Fields(in.Rest)
			fields = slices.DeleteFunc(fields, func(f string) bool { return strings.HasPrefix(f, "--") })
			if len(fields) == 0 {
				return df, fmt.Errorf("FROM without an image: %q", l)
			}
			s := stage{From: argRefRE.ReplaceAllStringFunc(fields[0], func(ref string) string {
				return df.Args[argRefRE.FindStringSubmatch(ref)[1]]
			})}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				s.Name = fields[2]
			}
			df.stages = append(df.stages, s)
		case len(df.stages) == 0:
			if in.Cmd != "ARG" {
				return df, fmt.Errorf("%s before the first FROM", in.Cmd)
			}
			name, value, _ := strings.Cut(in.Rest, "=")
			df.Args[name] = value
		default:
			s := &df.stages[len(df.stages)-1]
			s.Instructions = append(s.Instructions, in)
		}
	}
	if len(df.stages) == 0 {
		return df, fmt.Errorf("no FROM")
	}
	return df, nil
}

func parseDockerfile(t *testing.T, text string) dockerfile {
	t.Helper()
	df, err := parseDockerfileText(text)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return df
}

func TestParseDockerfile(t *testing.T) {
	tests := []struct {
		name       string
		text       string
		wantFroms  []string
		wantRun    string
		wantErrSub string
	}{
		{
			name:      "continuations and comments",
			text:      "ARG V=1.0\nFROM img:${V} AS b\nRUN a \\\n  # note\n  b \\\n  c\nFROM scratch\n",
			wantFroms: []string{"img:1.0", "scratch"},
			wantRun:   "a b c",
		},
		{
			name:      "platform flag",
			text:      "FROM --platform=$BUILDPLATFORM golang:1 AS builder\nRUN x\n",
			wantFroms: []string{"golang:1"},
			wantRun:   "x",
		},
		{name: "no FROM", text: "ARG A=1\n", wantErrSub: "no FROM"},
		{name: "RUN before FROM", text: "RUN x\nFROM a\n", wantErrSub: "before the first FROM"},
		{name: "dangling continuation", text: "FROM a\nRUN x \\\n", wantErrSub: "continuation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			df, err := parseDockerfileText(tc.text)
			if tc.wantErrSub != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSub) {
					t.Fatalf("got error %v, want one containing %q", err, tc.wantErrSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var froms []string
			for _, s := range df.stages {
				froms = append(froms, s.From)
			}
			if !slices.Equal(froms, tc.wantFroms) {
				t.Errorf("stages %q, want %q", froms, tc.wantFroms)
			}
			if got := df.stages[0].last("RUN"); got != tc.wantRun {
				t.Errorf("RUN %q, want %q", got, tc.wantRun)
			}
		})
	}
}

// versionVar is the variable the Dockerfile stamps the version into.
const versionVar = "github.com/nodeagent/nodeagent/pkg/version.gitVersion"

// goBuildRun returns the builder stage's RUN instruction that runs go build.
func goBuildRun(t *testing.T, s stage) string {
	t.Helper()
	for _, r := range s.all("RUN") {
		if strings.Contains(r, "go build") {
			return r
		}
	}
	t.Fatalf("stage %q has no RUN with go build", s.Name)
	return ""
}

func TestDockerfile(t *testing.T) {
	df := parseDockerfile(t, readRepoFile(t, "Dockerfile"))
	if len(df.stages) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(df.stages))
	}
	builder, final := df.stages[0], df.stages[len(df.stages)-1]
	build := goBuildRun(t, builder)

	tests := []struct {
		name  string
		check func() error
	}{
		{"builder is golang:1.26", func() error {
			return equal("builder image", builder.From, "golang:1.26")
		}},
		{"static, trimmed, stripped, stamped", func() error {
			for _, want := range []string{
				"CGO_ENABLED=0", "-trimpath", "-tags grpcnotrace", `-ldflags "-s -w `, "-X " + versionVar + "=${VERSION}",
				"-o /out/nodeagent", "./cmd/nodeagent",
			} {
				if !strings.Contains(build, want) {
					return fmt.Errorf("go build RUN %q lacks %q", build, want)
				}
			}
			return nil
		}},
		{"VERSION is a build argument", func() error {
			if !slices.ContainsFunc(builder.all("ARG"), func(a string) bool { return strings.HasPrefix(a, "VERSION") }) {
				return fmt.Errorf("builder ARGs %q lack VERSION", builder.all("ARG"))
			}
			return nil
		}},
		{"final stage is distroless static, root variant", func() error {
			if !strings.HasPrefix(final.From, "gcr.io/distroless/static-debian12") {
				return fmt.Errorf("final image %q, want gcr.io/distroless/static-debian12", final.From)
			}
			if strings.Contains(final.From, "nonroot") {
				return fmt.Errorf("final image %q runs as nonroot; the CRI socket needs root", final.From)
			}
			return nil
		}},
		{"final stage copies the binary from the builder", func() error {
			copies := final.all("COPY")
			want := fmt.Sprintf("--from=%s /out/nodeagent /usr/local/bin/nodeagent", builder.Name)
			if !slices.Equal(copies, []string{want}) {
				return fmt.Errorf("final COPY %q, want only %q", copies, want)
			}
			return nil
		}},
		{"final stage runs nothing at build time", func() error {
			if runs := final.all("RUN"); len(runs) > 0 {
				return fmt.Errorf("final stage RUN %q: distroless has no shell", runs)
			}
			return nil
		}},
		{"runs as root", func() error {
			if u := final.last("USER"); u != "0:0" && u != "0" && u != "root" {
				return fmt.Errorf("USER %q, want 0:0", u)
			}
			return nil
		}},
		{"exec-form entrypoint", func() error {
			return equal("ENTRYPOINT", final.last("ENTRYPOINT"), `["/usr/local/bin/nodeagent"]`)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestDockerignore(t *testing.T) {
	lines := strings.Split(readRepoFile(t, ".dockerignore"), "\n")
	for _, want := range []string{".git", "_output"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore lacks %q", want)
		}
	}
	for _, l := range lines {
		// Excluding these would break the build in the builder stage.
		for _, needed := range []string{"go.mod", "go.sum", "cmd", "pkg", "internal", "*", "**"} {
			if strings.TrimSpace(l) == needed {
				t.Errorf(".dockerignore excludes %q, which the build needs", l)
			}
		}
	}
}

// TestVersionVariable checks that the -X target of the Dockerfile is a
// package-level string variable, which is all -X can set.
func TestVersionVariable(t *testing.T) {
	pkgPath, name, _ := strings.Cut(strings.TrimPrefix(versionVar, "github.com/nodeagent/nodeagent/"), ".")
	dir := filepath.Join(repoRoot(t), pkgPath)
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s (%v)", dir, err)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if n.Name != name {
						continue
					}
					if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "string" {
						return
					}
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							return
						}
					}
					t.Fatalf("%s is not a string variable with a constant value; -X cannot set it", versionVar)
				}
			}
		}
	}
	t.Fatalf("no package-level var %s in %s", name, dir)
}

// TestDockerfileGoBuild runs the builder stage's go build command on this
// machine, as the image build would for linux/GOARCH, and checks the result:
// a statically linked executable (no ELF interpreter, no shared libraries)
// that reports the version passed as VERSION.
func TestDockerfileGoBuild(t *testing.T) {
	df := parseDockerfile(t, readRepoFile(t, "Dockerfile"))
	build := goBuildRun(t, df.stages[0])
	// Drop RUN's own --mount options; the rest is shell.
	fields := strings.Fields(build)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		fields = fields[1:]
	}
	script := strings.Join(fields, " ")
	out := filepath.Join(t.TempDir(), "nodeagent")
	if strings.Count(script, "-o /out/nodeagent") != 1 {
		t.Fatalf("cannot redirect the output of %q", script)
	}
	script = strings.Replace(script, "-o /out/nodeagent", "-o "+out, 1)

	const version = "v9.8.7-deploytest"
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "TARGETOS=linux", "TARGETARCH="+runtime.GOARCH, "VERSION="+version)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, b)
	}

	f, err := elf.Open(out)
	if err != nil {
		t.Fatalf("open the binary: %v", err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("binary has an ELF interpreter: not static")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("binary needs shared libraries %q (%v): not static", libs, err)
	}
	if f.Section(".symtab") != nil {
		t.Error("binary has a symbol table: -s did not apply")
	}

	b, err := exec.Command(out, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("nodeagent version: %v\n%s", err, b)
	}
	if !strings.Contains(string(b), version) {
		t.Errorf("nodeagent version printed %q, want it to contain %s", b, version)
	}
}
