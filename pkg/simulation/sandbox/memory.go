package sandbox

import (
	"context"
	"io"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"
)

// The memory a run holds is bounded before it is allocated. The interpreter expands words, assigns
// variables and fills command substitutions without calling a handler, so Run puts a guard in front
// of every statement: a no-op redirection `1>&$(<guardDir/ID)` as its first redirection, whose
// expansion reaches the open handler (the interpreter's $(<file) shortcut: no subshell, no exit
// status, no errexit) before anything else of the statement is expanded. The guard computes an upper
// bound of what the statement's own expansions may allocate (its words, assignments, here-documents,
// for/case/[[ ]]/(( )) words; see sizer) from the current variables' sizes, adds what the run already
// holds (its variables, the output of the command substitutions being filled, the positional
// parameters of the functions being called, what the statements around are expanding), and stops the
// run when the sum would pass Limits.Memory. The call handler does the same for a command's arguments
// and the output it may write (echo, printf, cat, seq...).

// guardDir is the directory of the guards' paths: under /dev/null, which no host has as a directory.
const guardDir = "/dev/null/nodeagent-sandbox-guard/"

// unbounded is the bound of what cannot be bounded (and saturates the sums).
const unbounded = int64(1) << 50

func sadd(a, b int64) int64 { return min(a+b, unbounded) }
func smul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a >= unbounded/b {
		return unbounded
	}
	return a * b
}

// guarded is what Run knows of each statement it guards, by ID.
type guarded struct {
	stmt *syntax.Stmt
	// parent is the ID of the statement whose expansion holds the command substitution that directly
	// holds this statement (-1: none); first: the statement is the first of that substitution.
	parent int
	first  bool
	// fn is the function whose body lexically holds the statement ("" at the script's top);
	// top: the statement is at the script's top (in no function, no command substitution).
	fn  string
	top bool
}

// level is one command substitution being filled (levels[0]: the run's own output, out nil).
type level struct {
	out     *strings.Builder
	maxLen  int64 // an upper bound of out's length
	pending int64 // what the statement expanding at this level holds: its bound, then its arguments
}

// frameCost and levelCost are what the interpreter itself holds for a function call and for a
// command substitution being filled (its stack frames, a subshell's state), counted towards
// Limits.Memory: so a recursion ends at the memory limit too (at about 120 calls deep with the default
// 1 MiB).
const (
	frameCost = 8 << 10
	levelCost = 4 << 10
)

// frame is a function call: the bytes of its positional parameters.
type frame struct {
	fn    string
	bytes int64
}

// guards puts a guard in front of every statement of file (see above) and returns them by ID.
func guards(file *syntax.File) []guarded {
	var out []guarded
	ours := map[*syntax.Stmt]bool{}
	type ctx struct {
		parent   int // statement ID holding the innermost command substitution
		first    *syntax.Stmt
		shortcut *syntax.Stmt // the statement of a $(<file)
		fn       string
		top      bool
	}
	var visit func(n syntax.Node, c ctx)
	visit = func(n syntax.Node, c ctx) {
		syntax.Walk(n, func(n syntax.Node) bool {
			switch n := n.(type) {
			case *syntax.Stmt:
				if c, ok := n.Cmd.(*syntax.CallExpr); ok && len(c.Args) == 1 && c.Args[0].Lit() == stepName || ours[n] {
					return false // Run's own step (shared by the loops), a guard
				}
				id := len(out)
				out = append(out, guarded{stmt: n, parent: c.parent, first: n == c.first, fn: c.fn, top: c.top})
				if c.shortcut == n {
					// $(<file): the interpreter reads the file without a subshell, and takes a
					// substitution in the file's name badly; the statement holding it bounds the name.
					visit(n.Redirs[0], c)
					return false
				}
				st := &syntax.Stmt{Redirs: []*syntax.Redirect{{
					Op: syntax.RdrIn, Word: &syntax.Word{Parts: []syntax.WordPart{&syntax.Lit{Value: guardDir + strconv.Itoa(id)}}}}}}
				ours[st] = true
				w := &syntax.Word{Parts: []syntax.WordPart{&syntax.CmdSubst{Stmts: []*syntax.Stmt{st}}}}
				redirs := n.Redirs
				n.Redirs = append([]*syntax.Redirect{{Op: syntax.DplOut, N: &syntax.Lit{Value: "1"}, Word: w}}, redirs...)
				// The statement's own parts, with this statement as the parent of their substitutions.
				inner := ctx{parent: id, fn: c.fn, top: c.top}
				if n.Cmd != nil {
					visit(n.Cmd, inner)
				}
				for _, rd := range redirs {
					visit(rd, inner)
				}
				return false
			case *syntax.CmdSubst:
				var first *syntax.Stmt
				if len(n.Stmts) > 0 {
					first = n.Stmts[0]
				}
				for _, st := range n.Stmts {
					visit(st, ctx{parent: c.parent, first: first, fn: c.fn, shortcut: catShortcut(n)})
				}
				return false
			case *syntax.FuncDecl:
				visit(n.Body, ctx{parent: -1, fn: n.Name.Value})
				return false
			}
			return true
		})
	}
	for _, st := range file.Stmts {
		visit(st, ctx{parent: -1, top: true})
	}
	return out
}

// catShortcut returns the statement of cs when cs is $(<file) (the interpreter's shortcut), else nil.
func catShortcut(cs *syntax.CmdSubst) *syntax.Stmt {
	if len(cs.Stmts) != 1 {
		return nil
	}
	st := cs.Stmts[0]
	if st.Cmd != nil || st.Negated || st.Background || st.Coprocess || st.Disown || len(st.Redirs) != 1 || st.Redirs[0].Op != syntax.RdrIn {
		return nil
	}
	return st
}

// varBytes is what a variable's value holds.
func varBytes(vr expand.Variable) int64 {
	n := int64(len(vr.Str))
	for _, s := range vr.List {
		n += int64(len(s)) + 1
	}
	for k, v := range vr.Map {
		n += int64(len(k) + len(v) + 1)
	}
	return n
}

// sizer bounds the bytes expansions allocate, from the variables' current sizes.
type sizer struct {
	env      expand.Environ
	all      int64 // all variables (the bound of an indirect reference)
	params   int64 // the positional parameters
	assigned map[string]int64
}

func (s *sizer) varSize(name string) int64 {
	switch name {
	case "@", "*":
		return s.params
	case "#", "?", "$", "!", "-", "PPID", "RANDOM", "SRANDOM", "LINENO":
		return 20
	case "0", "1", "2", "3", "4", "5", "6", "7", "8", "9":
		return s.params
	}
	if n, ok := s.assigned[name]; ok {
		return n
	}
	_, vr := s.env.Get(name).Resolve(s.env)
	return varBytes(vr)
}

func (s *sizer) assign(name string, n int64, add bool) {
	if s.assigned == nil {
		s.assigned = map[string]int64{}
	}
	if add {
		n = sadd(n, s.varSize(name))
	}
	s.assigned[name] = n
}

// stmt bounds what st expands before any statement within it runs (those have guards of their own).
func (s *sizer) stmt(st *syntax.Stmt) int64 {
	var n int64
	for _, rd := range st.Redirs {
		n = sadd(n, sadd(s.word(rd.Word), s.word(rd.Hdoc)))
	}
	switch c := st.Cmd.(type) {
	case *syntax.CallExpr:
		for _, w := range c.Args {
			n = sadd(n, s.word(w))
		}
		for _, as := range c.Assigns {
			n = sadd(n, s.assignExpr(as))
		}
	case *syntax.DeclClause:
		for _, as := range c.Args {
			n = sadd(n, s.assignExpr(as))
		}
	case *syntax.TestClause:
		n = sadd(n, s.test(c.X))
	case *syntax.ArithmCmd:
		n = sadd(n, s.arith(c.X))
	case *syntax.LetClause:
		for _, x := range c.Exprs {
			n = sadd(n, s.arith(x))
		}
	case *syntax.ForClause:
		switch l := c.Loop.(type) {
		case *syntax.WordIter:
			for _, w := range l.Items {
				n = sadd(n, s.word(w))
			}
		case *syntax.CStyleLoop:
			n = sadd(n, sadd(s.arith(l.Init), sadd(s.arith(l.Cond), s.arith(l.Post))))
		}
	case *syntax.CaseClause:
		n = sadd(n, s.word(c.Word))
		for _, it := range c.Items {
			for _, w := range it.Patterns {
				n = sadd(n, s.word(w))
			}
		}
	}
	return n
}

func (s *sizer) assignExpr(as *syntax.Assign) int64 {
	n := s.arith(as.Index)
	v := s.word(as.Value)
	if as.Array != nil {
		for _, e := range as.Array.Elems {
			v = sadd(v, sadd(s.word(e.Value), sadd(s.arith(e.Index), 1)))
		}
	}
	if as.Name != nil && !as.Naked {
		s.assign(as.Name.Value, v, as.Append || as.Index != nil)
	}
	return sadd(n, v)
}

func (s *sizer) test(x syntax.TestExpr) int64 {
	switch x := x.(type) {
	case *syntax.BinaryTest:
		return sadd(s.test(x.X), s.test(x.Y))
	case *syntax.UnaryTest:
		return s.test(x.X)
	case *syntax.ParenTest:
		return s.test(x.X)
	case *syntax.Word:
		return s.word(x)
	}
	return 0
}

func (s *sizer) arith(x syntax.ArithmExpr) int64 {
	switch x := x.(type) {
	case *syntax.BinaryArithm:
		return sadd(s.arith(x.X), s.arith(x.Y))
	case *syntax.UnaryArithm:
		return s.arith(x.X)
	case *syntax.ParenArithm:
		return s.arith(x.X)
	case *syntax.Word:
		return sadd(s.word(x), 20)
	}
	return 0
}

// word bounds the fields of w (their bytes and one per field): a brace expansion multiplies them.
func (s *sizer) word(w *syntax.Word) int64 {
	if w == nil {
		return 0
	}
	n := s.parts(w.Parts)
	if slices.ContainsFunc(w.Parts, func(p syntax.WordPart) bool {
		l, ok := p.(*syntax.Lit)
		return ok && strings.Contains(l.Value, "{")
	}) {
		c := *w
		c.Parts = slices.Clone(w.Parts)
		if syntax.SplitBraces(&c) {
			n = smul(n, braceWords(&c))
		}
	}
	return sadd(n, 1)
}

// braceWords is an upper bound of the words w's brace expansions make (the interpreter stops at
// maxBraceWords).
func braceWords(w *syntax.Word) int64 {
	n := int64(1)
	for _, p := range w.Parts {
		b, ok := p.(*syntax.BraceExp)
		if !ok {
			continue
		}
		var k int64
		if b.Sequence && len(b.Elems) >= 2 {
			from, err1 := strconv.ParseInt(b.Elems[0].Lit(), 10, 64)
			to, err2 := strconv.ParseInt(b.Elems[1].Lit(), 10, 64)
			k = 256 // letters
			if err1 == nil && err2 == nil {
				k = min(max(to-from, from-to), maxBraceWords) + 1
			}
		} else {
			for _, e := range b.Elems {
				k = sadd(k, braceWords(e))
			}
		}
		n = min(smul(n, k), maxBraceWords+1)
	}
	return n
}

func (s *sizer) parts(ps []syntax.WordPart) int64 {
	var n int64
	for _, p := range ps {
		switch p := p.(type) {
		case *syntax.Lit:
			n = sadd(n, int64(len(p.Value)))
		case *syntax.SglQuoted:
			n = sadd(n, int64(len(p.Value)))
		case *syntax.DblQuoted:
			n = sadd(n, s.parts(p.Parts))
		case *syntax.ParamExp:
			n = sadd(n, s.param(p))
		case *syntax.ArithmExp:
			n = sadd(n, sadd(s.arith(p.X), 20))
		case *syntax.ExtGlob:
			n = sadd(n, int64(len(p.Pattern.Value)+3))
		case *syntax.BraceExp:
			for _, e := range p.Elems {
				n = sadd(n, s.word(e))
			}
		case *syntax.CmdSubst:
			// Its output is measured as it is written (the guards of its statements, guardRead).
			if st := catShortcut(p); st != nil {
				n = sadd(n, s.word(st.Redirs[0].Word))
			}
		}
	}
	return n
}

func (s *sizer) param(p *syntax.ParamExp) int64 {
	if p.Length || p.Width {
		return sadd(s.arith(p.Index), 20)
	}
	var base int64
	switch {
	case p.Names != 0 || p.Excl && p.Index == nil || p.Param == nil:
		base = s.all // ${!prefix*}, ${!name}: names or a variable's value, at most all of them
	default:
		base = s.varSize(p.Param.Value)
	}
	if p.Excl && p.Index != nil {
		base = sadd(base, s.varSize(p.Param.Value)) // ${!a[@]}: the keys
	}
	// Every value is split into fields (one byte and a field each, at most).
	n := sadd(s.arith(p.Index), base)
	if p.Slice != nil {
		n = sadd(n, sadd(s.arith(p.Slice.Offset), s.arith(p.Slice.Length)))
	}
	if r := p.Repl; r != nil {
		with := s.word(r.With)
		if r.All {
			n = sadd(n, smul(sadd(base, 1), with))
		} else {
			n = sadd(n, with)
		}
		n = sadd(n, s.word(r.Orig))
	}
	if e := p.Exp; e != nil {
		w := s.word(e.Word)
		switch e.Op {
		case syntax.UpperFirst, syntax.UpperAll, syntax.LowerFirst, syntax.LowerAll:
			n = sadd(n, sadd(base, w)) // a case change may lengthen a rune
		case syntax.OtherParamOps:
			n = sadd(n, sadd(smul(base, 4), sadd(w, 64))) // ${a@Q}: quoted
		case syntax.AssignUnset, syntax.AssignUnsetOrNull:
			n = sadd(n, w)
			if p.Param != nil {
				s.assign(p.Param.Value, sadd(base, w), false)
			}
		default:
			n = sadd(n, w)
		}
	}
	return n
}

// memUse returns what the run holds now: its variables, the command substitutions being filled, what
// the statements around are expanding, the functions' parameters; and all variables alone.
func (r *run) memUse(env expand.Environ) (total, vars int64) {
	env.Each(func(name string, vr expand.Variable) bool {
		vars = sadd(vars, sadd(int64(len(name)), varBytes(vr)))
		return vars < unbounded
	})
	total = vars
	for _, l := range r.levels {
		total = sadd(total, sadd(l.maxLen, sadd(l.pending, levelCost)))
	}
	for _, f := range r.frames {
		total = sadd(total, sadd(f.bytes, frameCost))
	}
	return sadd(sadd(total, r.params), r.out.bytes()), vars
}

// paramsBound is an upper bound of the positional parameters now.
func (r *run) paramsBound() int64 {
	n := r.params
	for _, f := range r.frames {
		n = max(n, f.bytes)
	}
	return n
}

// depth returns the level a statement or command writing to out is at (syncing the levels with it).
func (r *run) depth(out io.Writer) int {
	if _, ok := out.(topOut); ok {
		r.levels = r.levels[:1]
		return 0
	}
	if b, ok := out.(*strings.Builder); ok {
		for i, l := range r.levels {
			if l.out == b {
				r.levels = r.levels[:i+1]
				r.levels[i].maxLen = int64(b.Len())
				return i
			}
		}
	}
	return len(r.levels) - 1
}

// guard is the guard of statement id (see above): it stops the run when the statement may take the
// run past Limits.Memory.
func (r *run) guard(ctx context.Context, id int) error {
	if id < 0 || id >= len(r.guarded) {
		return r.refusef("reads %s%d, a file of the image", guardDir, id)
	}
	g := r.guarded[id]
	hc := interp.HandlerCtx(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused != nil {
		return r.refused
	}
	if len(r.levels) == 0 {
		r.levels = []level{{}}
	}
	// The functions returned from (the statement is in another function's body).
	for len(r.frames) > 0 && r.frames[len(r.frames)-1].fn != g.fn {
		r.frames = r.frames[:len(r.frames)-1]
	}
	var d int
	b, isBuilder := hc.Stdout.(*strings.Builder)
	switch {
	case g.first && isBuilder:
		// A command substitution starts: its parent's level is where the parent statement is.
		pd := len(r.levels) - 1
		if pd2, ok := r.depths[g.parent]; ok && g.parent >= 0 && pd2 < len(r.levels) {
			pd = pd2
		}
		for len(r.levels) > pd+1 { // substitutions that ended: their output is in pd's expansion
			l := r.levels[len(r.levels)-1]
			r.levels = r.levels[:len(r.levels)-1]
			r.levels[pd].pending = sadd(r.levels[pd].pending, l.maxLen)
		}
		r.levels = append(r.levels, level{out: b})
		d = len(r.levels) - 1
	case g.top:
		r.levels = r.levels[:1]
		r.frames = r.frames[:0]
	default:
		d = r.depth(hc.Stdout)
	}
	if r.depths == nil {
		r.depths = map[int]int{}
	}
	r.depths[id] = d
	r.levels[d].pending = 0
	use, vars := r.memUse(hc.Env)
	sz := sizer{env: hc.Env, all: vars, params: r.paramsBound()}
	bound := sz.stmt(g.stmt)
	if sadd(use, bound) > r.lim.Memory {
		return r.stopLocked(refuseLimit("would hold more than %d bytes (the statement at %s)", r.lim.Memory, g.stmt.Pos()))
	}
	r.levels[d].pending = bound
	return nil
}

// guardCall is the guard of a command: its arguments, and the output it may write, within
// Limits.Memory with what the run holds. Called with r.mu held.
func (r *run) guardCall(ctx context.Context, fn bool, args []string) error {
	hc := interp.HandlerCtx(ctx)
	if len(r.levels) == 0 {
		r.levels = []level{{}}
	}
	d := r.depth(hc.Stdout)
	var argBytes int64
	for _, a := range args {
		argBytes += int64(len(a)) + 1
	}
	r.levels[d].pending = argBytes
	if fn {
		r.frames = append(r.frames, frame{fn: args[0], bytes: argBytes})
	}
	if args[0] == "set" || args[0] == "shift" {
		r.params = max(r.params, argBytes)
	}
	use, vars := r.memUse(hc.Env)
	out := r.outputBound(ctx, args, vars)
	if sadd(use, out) > r.lim.Memory {
		if fn {
			return refuseLimit("would hold more than %d bytes (calling %s, %d calls deep)", r.lim.Memory, args[0], len(r.frames))
		}
		return refuseLimit("would hold more than %d bytes (%s's arguments and output)", r.lim.Memory, args[0])
	}
	if b, ok := hc.Stdout.(*strings.Builder); ok && r.levels[d].out == b {
		r.levels[d].maxLen = sadd(int64(b.Len()), out)
	}
	return nil
}

// outputBound is an upper bound of what command args writes (and formats in memory).
func (r *run) outputBound(ctx context.Context, args []string, vars int64) int64 {
	var argBytes int64
	for _, a := range args[1:] {
		argBytes += int64(len(a)) + 1
	}
	switch args[0] {
	case "echo":
		return sadd(argBytes, 1) // an escape of echo -e is never shorter than what it writes
	case "printf":
		a := args[1:]
		if len(a) >= 2 && a[0] == "-v" {
			a = a[2:]
		}
		if len(a) == 0 {
			return 0
		}
		// The format is used again for the arguments it did not consume.
		return smul(printfWidth(a[0], a[1:]), int64(max(1, len(a)-1)))
	case "cat", "head", "tail": // at most the files (a header each)
		var n int64
		_, ops := operands(args[1:])
		if len(ops) == 0 {
			return r.lim.Memory // stdin, read up to the limit
		}
		for _, name := range ops {
			if fsys, inner, _, err := r.file(ctx, name, false); err == nil {
				if info, err := fsys.Stat(inner); err == nil {
					n = sadd(n, info.Size()+int64(len(name))+8)
				}
			}
		}
		return n
	case "seq":
		_, ops := operands(args[1:])
		if len(ops) == 0 {
			return 0
		}
		first, incr, last := int64(1), int64(1), int64(0)
		nums := make([]int64, len(ops))
		for i, o := range ops {
			nums[i], _ = strconv.ParseInt(o, 10, 64)
		}
		switch len(nums) {
		case 1:
			last = nums[0]
		case 2:
			first, last = nums[0], nums[1]
		default:
			first, incr, last = nums[0], nums[1], nums[2]
		}
		if incr == 0 || (last-first)/incr < 0 {
			return 0
		}
		return smul((last-first)/incr+1, 21)
	case "sysctl": // each operand's name and value, at most once each
		var values int64
		for _, v := range r.p.Sysctls {
			values = sadd(values, int64(len(v))+1)
		}
		return sadd(sadd(smul(argBytes, 2), smul(values, int64(len(args)))), 4096)
	case "id": // "uid=N(root) gid=N(root) groups=" and a group per entry, each at most 20 digits and "(root),"
		return sadd(smul(int64(len(r.p.Groups)+3), 28), 32)
	case "set", "declare", "typeset", "export", "readonly", "local", "env", "printenv":
		return sadd(smul(vars, 4), argBytes) // listings of the variables, quoted
	}
	return sadd(argBytes, 4096) // messages, pwd, the small outputs of the other programs
}

// guardRead bounds a file read (a redirection, $(<file)): its contents within Limits.Memory with what
// the run holds.
func (r *run) guardRead(ctx context.Context, fsys *FS, inner string) error {
	info, err := fsys.Stat(inner)
	if err != nil {
		return nil
	}
	hc := interp.HandlerCtx(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.levels) == 0 {
		r.levels = []level{{}}
	}
	use, _ := r.memUse(hc.Env)
	if sadd(use, info.Size()) > r.lim.Memory {
		return refuseLimit("would hold more than %d bytes (reading %s)", r.lim.Memory, inner)
	}
	d := len(r.levels) - 1
	r.levels[d].pending = sadd(r.levels[d].pending, info.Size())
	return nil
}
