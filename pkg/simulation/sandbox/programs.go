package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
)

// program is a program the sandbox implements, as busybox's (the e2e images' shell) behaves: its
// output goes to the handler context's stdout, its failures to stderr with exit status 1 (2 for a
// usage error, as expr's), never to the host.
type program func(ctx context.Context, r *run, args []string) error

var programs map[string]program

func init() {
	programs = map[string]program{
		"sleep": progSleep, "true": func(context.Context, *run, []string) error { return nil },
		"false": func(context.Context, *run, []string) error { return interp.ExitStatus(1) },
		"expr":  progExpr, "touch": progTouch, "cat": progCat, "mkdir": progMkdir, "rm": progRm,
		"env": progEnv, "printenv": progEnv, "hostname": progHostname, "seq": progSeq,
		"basename": progBasename, "dirname": progDirname, "echo": progEcho,
		"ls": progLs, "mv": progMv, "cp": progCp, "id": progID, "sysctl": progSysctl,
		"head": progHeadTail, "tail": progHeadTail, "mount": progMount, "ip": progIP,
	}
}

// fail prints "name: message" to stderr and returns exit status code.
func fail(ctx context.Context, code uint8, name, format string, a ...any) error {
	fmt.Fprintf(interp.HandlerCtx(ctx).Stderr, name+": "+format+"\n", a...)
	return interp.ExitStatus(code)
}

func operands(args []string) (flags string, ops []string) {
	for i, a := range args {
		if a == "--" {
			return flags, append(ops, args[i+1:]...)
		}
		if len(a) > 1 && a[0] == '-' && len(ops) == 0 {
			flags += a[1:]
			continue
		}
		ops = append(ops, a)
	}
	return flags, ops
}

// progSleep: sleep DURATION... (a number of seconds with an optional s, m, h or d suffix, fractions
// allowed; "infinity"): the sum, in simulated time.
func progSleep(ctx context.Context, r *run, args []string) error {
	if len(args) < 2 {
		return fail(ctx, 1, "sleep", "missing operand")
	}
	var total time.Duration
	for _, a := range args[1:] {
		if a == "infinity" || a == "inf" {
			return errForever
		}
		unit := time.Second
		num := a
		switch {
		case strings.HasSuffix(a, "s"):
			num = a[:len(a)-1]
		case strings.HasSuffix(a, "m"):
			num, unit = a[:len(a)-1], time.Minute
		case strings.HasSuffix(a, "h"):
			num, unit = a[:len(a)-1], time.Hour
		case strings.HasSuffix(a, "d"):
			num, unit = a[:len(a)-1], 24*time.Hour
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil || f < 0 || math.IsNaN(f) {
			return fail(ctx, 1, "sleep", "invalid number '%s'", a)
		}
		d := f * float64(unit)
		if d > float64(r.lim.Horizon) {
			return errForever
		}
		total += time.Duration(d)
	}
	return r.sleep(total)
}

// progExpr: POSIX expr (| & = != < <= > >= + - * / % length substr index, parentheses), printing the
// result; exit 0 when it is neither empty nor 0, 1 when it is, 2 for a bad expression. The regular
// expression operators (":" and match) are not honoured.
func progExpr(ctx context.Context, r *run, args []string) error {
	e := exprParser{tokens: args[1:]}
	v, err := e.or()
	if err == nil && e.pos < len(e.tokens) {
		err = fmt.Errorf("syntax error: unexpected argument '%s'", e.tokens[e.pos])
	}
	if err != nil {
		var nh *notHonoured
		if errors.As(err, &nh) {
			return err
		}
		return fail(ctx, 2, "expr", "%v", err)
	}
	fmt.Fprintln(interp.HandlerCtx(ctx).Stdout, v)
	if v == "" || v == "0" {
		return interp.ExitStatus(1)
	}
	return nil
}

type exprParser struct {
	tokens []string
	pos    int
}

func (e *exprParser) peek() string {
	if e.pos < len(e.tokens) {
		return e.tokens[e.pos]
	}
	return ""
}

func (e *exprParser) more() bool { return e.pos < len(e.tokens) }

func null(v string) bool { return v == "" || v == "0" }

func (e *exprParser) or() (string, error) {
	l, err := e.and()
	for err == nil && e.more() && e.peek() == "|" {
		e.pos++
		var rv string
		if rv, err = e.and(); err == nil && null(l) {
			l = rv
			if null(rv) {
				l = "0"
			}
		}
	}
	return l, err
}

func (e *exprParser) and() (string, error) {
	l, err := e.cmp()
	for err == nil && e.more() && e.peek() == "&" {
		e.pos++
		var rv string
		if rv, err = e.cmp(); err == nil && (null(l) || null(rv)) {
			l = "0"
		}
	}
	return l, err
}

func (e *exprParser) cmp() (string, error) {
	l, err := e.add()
	for err == nil && e.more() {
		op := e.peek()
		if op != "=" && op != "==" && op != "!=" && op != "<" && op != "<=" && op != ">" && op != ">=" {
			break
		}
		e.pos++
		var rv string
		if rv, err = e.add(); err != nil {
			break
		}
		c := strings.Compare(l, rv)
		li, lerr := strconv.ParseInt(l, 10, 64)
		ri, rerr := strconv.ParseInt(rv, 10, 64)
		if lerr == nil && rerr == nil {
			c = 0
			if li < ri {
				c = -1
			} else if li > ri {
				c = 1
			}
		}
		ok := map[string]bool{"=": c == 0, "==": c == 0, "!=": c != 0, "<": c < 0, "<=": c <= 0, ">": c > 0, ">=": c >= 0}[op]
		l = "0"
		if ok {
			l = "1"
		}
	}
	return l, err
}

func (e *exprParser) arith(next func() (string, error), ops string) (string, error) {
	l, err := next()
	for err == nil && e.more() && len(e.peek()) == 1 && strings.Contains(ops, e.peek()) {
		op := e.peek()
		e.pos++
		var rv string
		if rv, err = next(); err != nil {
			break
		}
		li, lerr := strconv.ParseInt(l, 10, 64)
		ri, rerr := strconv.ParseInt(rv, 10, 64)
		if lerr != nil || rerr != nil {
			return "", errors.New("non-integer argument")
		}
		var n int64
		switch op {
		case "+":
			n = li + ri
		case "-":
			n = li - ri
		case "*":
			n = li * ri
		case "/", "%":
			if ri == 0 {
				return "", errors.New("division by zero")
			}
			if op == "/" {
				n = li / ri
			} else {
				n = li % ri
			}
		}
		l = strconv.FormatInt(n, 10)
	}
	return l, err
}

func (e *exprParser) add() (string, error) { return e.arith(e.mul, "+-") }
func (e *exprParser) mul() (string, error) { return e.arith(e.primary, "*/%") }

func (e *exprParser) primary() (string, error) {
	if !e.more() {
		return "", errors.New("syntax error: missing argument")
	}
	t := e.tokens[e.pos]
	e.pos++
	switch t {
	case "(":
		v, err := e.or()
		if err != nil {
			return "", err
		}
		if e.peek() != ")" {
			return "", errors.New("syntax error: expecting ')'")
		}
		e.pos++
		return v, nil
	case "length":
		v, err := e.primary()
		return strconv.Itoa(len(v)), err
	case "substr":
		s, err1 := e.primary()
		p, err2 := e.primary()
		n, err3 := e.primary()
		if err := errors.Join(err1, err2, err3); err != nil {
			return "", err
		}
		pi, perr := strconv.Atoi(p)
		ni, nerr := strconv.Atoi(n)
		if perr != nil || nerr != nil || pi < 1 || ni < 1 || pi > len(s) {
			return "", nil
		}
		return s[pi-1 : min(len(s), pi-1+ni)], nil
	case "index":
		s, err1 := e.primary()
		chars, err2 := e.primary()
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		return strconv.Itoa(strings.IndexAny(s, chars) + 1), nil
	case "match", ":":
		return "", refuse("runs expr %s (regular expressions are not interpreted)", t)
	case "+":
		return e.primary() // GNU's quoting of a token
	}
	if e.peek() == ":" {
		return "", refuse("runs expr : (regular expressions are not interpreted)")
	}
	return t, nil
}

// path resolution for the file programs: the file system and inner path of p, refusing a path of the
// image the run has not written (unless creating is allowed there).
func (r *run) file(ctx context.Context, p string, create bool) (*FS, string, bool, error) {
	p = abs(ctx, p)
	if fsys, inner, ok := r.kernelFile(p); ok {
		return fsys, inner, true, nil
	}
	if p == "/dev/null" && !create { // read: empty, as on Linux
		return r.devFS(), "/null", false, nil
	}
	if strings.HasPrefix(p, "/dev/") || strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/sys/") {
		return nil, "", false, refuse("uses %s, a device or kernel file", p)
	}
	fsys, inner, ro, rootfs := r.resolve(p)
	if rootfs && !fsys.Known(inner) && !(create && fsys.Known(path.Dir(inner))) {
		return nil, "", false, unknown(p)
	}
	return fsys, inner, ro, nil
}

// describe turns an FS error into busybox's words.
func describe(err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "No such file or directory"
	case errors.Is(err, fs.ErrExist):
		return "File exists"
	case errors.Is(err, syscall.EROFS):
		return "Read-only file system"
	case errors.Is(err, syscall.ENOSPC):
		return "No space left on device"
	case errors.Is(err, syscall.EISDIR):
		return "Is a directory"
	case errors.Is(err, syscall.ENOTDIR):
		return "Not a directory"
	case errors.Is(err, syscall.ENOTEMPTY):
		return "Directory not empty"
	}
	return err.Error()
}

func progTouch(ctx context.Context, r *run, args []string) error {
	_, ops := operands(args[1:])
	if len(ops) == 0 {
		return fail(ctx, 1, "touch", "missing file operand")
	}
	status := error(nil)
	for _, name := range ops {
		fsys, inner, ro, err := r.file(ctx, name, true)
		if err != nil {
			return err
		}
		if ro {
			err = roErr("touch", name)
		} else {
			err = fsys.Touch(inner, r.now())
		}
		if err != nil {
			status = fail(ctx, 1, "touch", "%s: %s", name, describe(err))
		}
	}
	return status
}

func progCat(ctx context.Context, r *run, args []string) error {
	_, ops := operands(args[1:])
	hc := interp.HandlerCtx(ctx)
	if len(ops) == 0 {
		if hc.Stdin != nil {
			_, _ = io.Copy(hc.Stdout, io.LimitReader(hc.Stdin, r.lim.Memory))
		}
		return nil
	}
	status := error(nil)
	for _, name := range ops {
		fsys, inner, _, err := r.file(ctx, name, false)
		if err != nil {
			return err
		}
		f, err := fsys.OpenFile(inner, os.O_RDONLY, 0)
		if err != nil {
			status = fail(ctx, 1, "cat", "%s: %s", name, describe(err))
			continue
		}
		_, _ = io.Copy(hc.Stdout, f)
		_ = f.Close()
	}
	return status
}

func progMkdir(ctx context.Context, r *run, args []string) error {
	flags, ops := operands(args[1:])
	parents := strings.Contains(flags, "p")
	if len(ops) == 0 {
		return fail(ctx, 1, "mkdir", "missing operand")
	}
	status := error(nil)
	for _, name := range ops {
		fsys, inner, ro, err := r.file(ctx, name, true)
		if err != nil && !(parents && errors.As(err, new(*notHonoured))) {
			return err
		}
		if err != nil { // mkdir -p of a path of the image: made in the container's layer
			fsys, inner, ro, _ = r.resolve(abs(ctx, name))
		}
		switch {
		case ro:
			err = roErr("mkdir", name)
		case parents:
			err = fsys.MkdirAll(inner)
		default:
			err = fsys.Mkdir(inner)
		}
		if err != nil {
			status = fail(ctx, 1, "mkdir", "can't create directory '%s': %s", name, describe(err))
		}
	}
	return status
}

func progRm(ctx context.Context, r *run, args []string) error {
	flags, ops := operands(args[1:])
	force := strings.Contains(flags, "f")
	recursive := strings.ContainsAny(flags, "rR")
	status := error(nil)
	for _, name := range ops {
		p := abs(ctx, name)
		if p == "/" {
			return refuse("removes /, the image's files")
		}
		for _, m := range r.p.Mounts {
			if path.Clean(m.Path) == p {
				return refuse("removes %s, a volume's mount point", p)
			}
		}
		fsys, inner, ro, err := r.file(ctx, name, false)
		if err != nil {
			return err
		}
		info, err := fsys.Stat(inner)
		switch {
		case err != nil && force:
			continue
		case err != nil:
		case ro:
			err = roErr("rm", name)
		case info.IsDir() && !recursive:
			err = pathErr("rm", name, syscall.EISDIR)
		default:
			err = fsys.Remove(inner, recursive)
		}
		if err != nil {
			status = fail(ctx, 1, "rm", "can't remove '%s': %s", name, describe(err))
		}
	}
	return status
}

func progEnv(ctx context.Context, r *run, args []string) error {
	hc := interp.HandlerCtx(ctx)
	if len(args) > 1 && args[0] == "env" {
		return refuse("runs env with arguments (a program with a changed environment)")
	}
	if args[0] == "printenv" && len(args) > 1 {
		status := error(interp.ExitStatus(1))
		for _, name := range args[1:] {
			if v := hc.Env.Get(name); v.IsSet() && v.Exported {
				fmt.Fprintln(hc.Stdout, v.String())
				status = nil
			}
		}
		return status
	}
	var lines []string
	hc.Env.Each(func(name string, vr expand.Variable) bool {
		if vr.Exported && vr.IsSet() {
			lines = append(lines, name+"="+vr.String())
		}
		return true
	})
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Fprintln(hc.Stdout, l)
	}
	return nil
}

func progHostname(ctx context.Context, r *run, args []string) error {
	if len(args) > 1 {
		return refuse("runs hostname with arguments")
	}
	fmt.Fprintln(interp.HandlerCtx(ctx).Stdout, r.p.Hostname)
	return nil
}

func progSeq(ctx context.Context, r *run, args []string) error {
	_, ops := operands(args[1:])
	nums := make([]int64, len(ops))
	for i, o := range ops {
		n, err := strconv.ParseInt(o, 10, 64)
		if err != nil {
			return fail(ctx, 1, "seq", "invalid number '%s'", o)
		}
		nums[i] = n
	}
	first, incr, last := int64(1), int64(1), int64(0)
	switch len(nums) {
	case 1:
		last = nums[0]
	case 2:
		first, last = nums[0], nums[1]
	case 3:
		first, incr, last = nums[0], nums[1], nums[2]
	default:
		return fail(ctx, 1, "seq", "usage: seq [FIRST [INC]] LAST")
	}
	if incr == 0 {
		return fail(ctx, 1, "seq", "invalid increment '0'")
	}
	count := (last - first) / incr
	if count < 0 {
		return nil
	}
	if count+1 > r.lim.Memory/2 {
		return refuseLimit("runs seq of %d numbers, more than its memory allows", count+1)
	}
	out := interp.HandlerCtx(ctx).Stdout
	for n := first; (incr > 0 && n <= last) || (incr < 0 && n >= last); n += incr {
		fmt.Fprintln(out, n)
	}
	return nil
}

func progBasename(ctx context.Context, _ *run, args []string) error {
	if len(args) < 2 {
		return fail(ctx, 1, "basename", "missing operand")
	}
	b := path.Base(args[1])
	if len(args) > 2 && b != args[2] {
		b = strings.TrimSuffix(b, args[2])
	}
	fmt.Fprintln(interp.HandlerCtx(ctx).Stdout, b)
	return nil
}

func progDirname(ctx context.Context, _ *run, args []string) error {
	if len(args) < 2 {
		return fail(ctx, 1, "dirname", "missing operand")
	}
	fmt.Fprintln(interp.HandlerCtx(ctx).Stdout, path.Dir(args[1]))
	return nil
}

func progEcho(ctx context.Context, _ *run, args []string) error {
	a := args[1:]
	nl := "\n"
	if len(a) > 0 && a[0] == "-n" {
		a, nl = a[1:], ""
	}
	fmt.Fprint(interp.HandlerCtx(ctx).Stdout, strings.Join(a, " ")+nl)
	return nil
}

// progLs: ls [-1aA] [FILE...]: a directory's entries one per line (its output is not a terminal), a
// file's name as given; with more than one operand each directory's under a "name:" header. Other
// options (-l: owners, modes, sizes and times) are not honoured.
func progLs(ctx context.Context, r *run, args []string) error {
	flags, ops := operands(args[1:])
	if strings.Trim(flags, "1aA") != "" {
		return refuse("runs ls -%s (only -1, -a and -A are interpreted)", flags)
	}
	all := strings.Contains(flags, "a")
	if len(ops) == 0 {
		ops = []string{"."}
	}
	hc := interp.HandlerCtx(ctx)
	status := error(nil)
	var dirs []string
	for _, name := range ops {
		fsys, inner, _, err := r.file(ctx, name, false)
		if err != nil {
			if !errors.As(err, new(*notHonoured)) {
				return err
			}
			p := abs(ctx, name)
			if _, _, _, rootfs := r.resolve(p); rootfs {
				return refuse("lists %s, a directory of the image (not known to the simulator)", p)
			}
			return err
		}
		info, err := fsys.Stat(inner)
		if err != nil {
			status = fail(ctx, 1, "ls", "%s: %s", name, describe(err))
			continue
		}
		if !info.IsDir() {
			fmt.Fprintln(hc.Stdout, name)
			continue
		}
		dirs = append(dirs, name)
	}
	for i, name := range dirs {
		p := abs(ctx, name)
		fsys, inner, _, rootfs := r.resolve(p)
		if rootfs && !r.ownDir(p) {
			return refuse("lists %s, a directory of the image (not known to the simulator)", p)
		}
		entries, err := fsys.ReadDir(inner)
		if err != nil {
			status = fail(ctx, 1, "ls", "%s: %s", name, describe(err))
			continue
		}
		if len(ops) > 1 {
			if i > 0 {
				fmt.Fprintln(hc.Stdout)
			}
			fmt.Fprintf(hc.Stdout, "%s:\n", name)
		}
		names := []string{}
		if all {
			names = append(names, ".", "..")
		}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		for _, m := range r.p.Mounts { // mount points under p made in the layer are its entries already
			if mp := path.Clean(m.Path); path.Dir(mp) == p && !slices.Contains(names, path.Base(mp)) {
				names = append(names, path.Base(mp))
			}
		}
		slices.Sort(names)
		for _, n := range names {
			if !all && strings.HasPrefix(n, ".") && !(strings.Contains(flags, "A") && n != "." && n != "..") {
				continue
			}
			fmt.Fprintln(hc.Stdout, n)
		}
	}
	return status
}

// ownDir reports whether p is a directory of the container's layer that lists faithfully: one the run
// made or the sandbox knows (/tmp, the working directory, the parents of mount points), not a
// directory of the image (whose files are not known).
func (r *run) ownDir(p string) bool {
	return p != "/" && r.rootfs.Exists(p)
}

// progMv: mv SOURCE... DEST: a file or directory renamed within its volume or the container's layer
// (into DEST when it is a directory); a file moved to another volume is copied, then removed; a
// directory moved to another is not honoured.
func progMv(ctx context.Context, r *run, args []string) error {
	return moveOrCopy(ctx, r, args, true)
}

// progCp: cp SOURCE... DEST: files copied (into DEST when it is a directory); -r and directories are
// not honoured.
func progCp(ctx context.Context, r *run, args []string) error {
	return moveOrCopy(ctx, r, args, false)
}

func moveOrCopy(ctx context.Context, r *run, args []string, move bool) error {
	name := args[0]
	flags, ops := operands(args[1:])
	if strings.Trim(flags, "f") != "" {
		return refuse("runs %s -%s (only -f is interpreted)", name, flags)
	}
	if len(ops) < 2 {
		return fail(ctx, 1, name, "missing file operand")
	}
	dest := ops[len(ops)-1]
	dfs, dinner, dro, err := r.file(ctx, dest, true)
	if err != nil {
		return err
	}
	dinfo, derr := dfs.Stat(dinner)
	destDir := derr == nil && dinfo.IsDir()
	if len(ops) > 2 && !destDir {
		return fail(ctx, 1, name, "'%s' is not a directory", dest)
	}
	status := error(nil)
	for _, src := range ops[:len(ops)-1] {
		sfs, sinner, sro, err := r.file(ctx, src, false)
		if err != nil {
			return err
		}
		target, tinner := dest, dinner
		if destDir {
			target, tinner = path.Join(dest, path.Base(sinner)), path.Join(dinner, path.Base(sinner))
		}
		info, err := sfs.Stat(sinner)
		switch {
		case err != nil:
		case dro || (move && sro):
			err = roErr(name, target)
		case move && sfs == dfs:
			err = sfs.Rename(sinner, tinner)
		case info.IsDir():
			return refuse("%ss the directory %s (only files are copied)", name, src)
		default:
			err = copyFile(sfs, sinner, dfs, tinner)
			if err == nil && move {
				err = sfs.Remove(sinner, false)
			}
		}
		if err != nil {
			status = fail(ctx, 1, name, "can't %s '%s': %s", map[bool]string{true: "rename", false: "create"}[move], src, describe(err))
		}
	}
	return status
}

// copyFile copies file sname of sfs to dname of dfs (made or truncated).
func copyFile(sfs *FS, sname string, dfs *FS, dname string) error {
	in, err := sfs.OpenFile(sname, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	out, err := dfs.OpenFile(dname, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return err
}

// progID is busybox's id for the run's user (Program.UID, GID, Groups): "uid=U gid=G groups=G,S..."
// (the primary group first, then the supplementary ones, each once), -u, -g, -G and their -n forms.
// Only ID 0's name, root, is known (the image's /etc/passwd and /etc/group are not): another name
// is busybox's "unknown ID" (exit 1). A user operand is not honoured (the image's users).
func progID(ctx context.Context, r *run, args []string) error {
	flags, ops := operands(args[1:])
	if len(ops) > 0 {
		return refuse("runs id with a user operand (the image's users are not known)")
	}
	hc := interp.HandlerCtx(ctx)
	name := func(id int64) (string, bool) { return "root", id == 0 }
	groups := []int64{r.p.GID}
	for _, g := range r.p.Groups {
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	var ids []int64
	names := strings.Contains(flags, "n")
	switch strings.ReplaceAll(strings.ReplaceAll(flags, "n", ""), "r", "") {
	case "":
		if names {
			return fail(ctx, 1, "id", "-n is only valid with -u, -g or -G")
		}
		withName := func(id int64) string {
			if n, ok := name(id); ok {
				return fmt.Sprintf("%d(%s)", id, n)
			}
			return strconv.FormatInt(id, 10)
		}
		var gs []string
		for _, g := range groups {
			gs = append(gs, withName(g))
		}
		fmt.Fprintf(hc.Stdout, "uid=%s gid=%s groups=%s\n", withName(r.p.UID), withName(r.p.GID), strings.Join(gs, ","))
		return nil
	case "u":
		ids = []int64{r.p.UID}
	case "g":
		ids = []int64{r.p.GID}
	case "G":
		ids = groups
	default:
		return refuse("runs id -%s", flags)
	}
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if !names {
			out = append(out, strconv.FormatInt(id, 10))
			continue
		}
		n, ok := name(id)
		if !ok {
			return fail(ctx, 1, "id", "unknown ID %d", id)
		}
		out = append(out, n)
	}
	fmt.Fprintln(hc.Stdout, strings.Join(out, " "))
	return nil
}

// kernelFile returns the file system and path of p when it is a kernel file the run knows: a file of
// its /proc/sys (the pod's sysctls) or of its /sys/fs/cgroup (Program.Cgroup), both read-only.
// Only files: a directory of /proc/sys or /sys/fs/cgroup holds the kernel's other files too.
func (r *run) kernelFile(p string) (*FS, string, bool) {
	for _, k := range []struct {
		dir  string
		fsys *FS
	}{{"/proc/sys/", r.sysctlFS}, {CgroupDir + "/", r.cgroupFS}} {
		if name, ok := strings.CutPrefix(p, k.dir); ok && k.fsys != nil {
			if info, err := k.fsys.Stat(name); err == nil && !info.IsDir() {
				return k.fsys, name, true
			}
		}
	}
	return nil, "", false
}

// CgroupDir is where runc mounts the container's cgroup (v2) file system.
const CgroupDir = "/sys/fs/cgroup"

// makeCgroup makes the run's /sys/fs/cgroup: a file per Program.Cgroup entry.
func (r *run) makeCgroup() {
	if len(r.p.Cgroup) == 0 {
		return
	}
	r.cgroupFS = NewFS(0)
	for name, v := range r.p.Cgroup {
		if strings.Contains(name, "/") {
			continue
		}
		if f, err := r.cgroupFS.OpenFile("/"+name, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
			_, _ = io.WriteString(f, v)
			_ = f.Close()
		}
	}
}

// progMount is busybox's mount listing the mounts of one type (mount -t TYPE): the container's cgroup
// v2 file system as runc mounts it (read-only), when Program.Cgroup is set; no line for another type
// the simulator knows nothing of is not honoured, nor is mounting anything.
func progMount(ctx context.Context, r *run, args []string) error {
	if len(args) != 3 || args[1] != "-t" || args[2] != "cgroup2" || len(r.p.Cgroup) == 0 {
		return refuse("runs mount %s (only mount -t cgroup2, the container's cgroup, is honoured)", strings.Join(args[1:], " "))
	}
	fmt.Fprintf(interp.HandlerCtx(ctx).Stdout, "cgroup on %s type cgroup2 (ro,nosuid,nodev,noexec,relatime)\n", CgroupDir)
	return nil
}

// makeProcSys makes the run's /proc/sys: a file per Program.Sysctls entry (kernel/shm_rmid_forced
// holding "1\n").
func (r *run) makeProcSys() {
	if len(r.p.Sysctls) == 0 {
		return
	}
	r.sysctlFS = NewFS(0)
	for name, v := range r.p.Sysctls {
		file := "/" + swapSeparators(name)
		if r.sysctlFS.MkdirAll(path.Dir(file)) != nil {
			continue
		}
		if f, err := r.sysctlFS.OpenFile(file, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
			_, _ = io.WriteString(f, v+"\n")
			_ = f.Close()
		}
	}
}

// SysctlDots is a sysctl's name with dots as separators, as the kubelet's
// sysctl.ConvertSysctlVariableToDotsSeparator makes it: a name whose first separator is a slash
// (kernel/shm_rmid_forced) has its slashes and dots swapped.
func SysctlDots(name string) string {
	if i := strings.IndexAny(name, "./"); i >= 0 && name[i] == '/' {
		return swapSeparators(name)
	}
	return name
}

// swapSeparators swaps the dots and slashes of a sysctl's name (kernel.shm_rmid_forced is the file
// kernel/shm_rmid_forced of /proc/sys, net.ipv4.conf.eth0/100.forwarding net/ipv4/conf/eth0.100/forwarding).
func swapSeparators(name string) string {
	return strings.Map(func(c rune) rune {
		switch c {
		case '/':
			return '.'
		case '.':
			return '/'
		}
		return c
	}, name)
}

// progSysctl is busybox's sysctl reading kernel parameters: "sysctl [-n] NAME..." prints
// "NAME = VALUE" (or VALUE with -n) for each, the name with dots (SysctlDots). Only the pod's own
// sysctls (Program.Sysctls) are known: another parameter, -a, and writing (-w, NAME=VALUE) are not
// honoured (the kernel's values are not known to the simulator).
func progSysctl(ctx context.Context, r *run, args []string) error {
	flags, ops := operands(args[1:])
	if strings.Trim(flags, "n") != "" || len(ops) == 0 {
		return refuse("runs sysctl %s (only reading the pod's sysctls is honoured)", strings.Join(args[1:], " "))
	}
	hc := interp.HandlerCtx(ctx)
	for _, o := range ops {
		name := SysctlDots(o)
		v, ok := r.p.Sysctls[name]
		if !ok || strings.Contains(o, "=") {
			return refuse("runs sysctl %s, a kernel parameter the pod does not set (the kernel's value is not known)", o)
		}
		if flags != "" {
			fmt.Fprintln(hc.Stdout, v)
		} else {
			fmt.Fprintf(hc.Stdout, "%s = %s\n", name, v)
		}
	}
	return nil
}

// headTailArgs parses busybox head's and tail's options: -n N (tail: +N from the Nth line), -c N
// (bytes), the obsolete -N, -q and -v (headers), tail's -f, -F and -s SEC (follow). n is the count,
// from true for tail's +N, bytes for -c; files are the operands.
type headTailArgs struct {
	n                   int64
	from, bytes, follow bool
	quiet, verbose      bool
	files               []string
}

func parseHeadTail(name string, args []string) (headTailArgs, string) {
	a := headTailArgs{n: 10}
	count := func(v string, opt byte) string {
		if name == "tail" && strings.HasPrefix(v, "+") {
			a.from, v = true, v[1:]
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || (n < 0 && name == "tail") {
			return fmt.Sprintf("invalid number '%s'", v)
		}
		a.n, a.bytes = n, opt == 'c'
		return ""
	}
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" {
			a.files = append(a.files, args[i+1:]...)
			break
		}
		if len(arg) < 2 || arg[0] != '-' {
			a.files = append(a.files, arg)
			continue
		}
		if arg[1] >= '0' && arg[1] <= '9' { // -N: -n N
			if why := count(arg[1:], 'n'); why != "" {
				return a, why
			}
			continue
		}
		for j := 1; j < len(arg); j++ {
			switch c := arg[j]; {
			case c == 'n' || c == 'c' || c == 's':
				v := arg[j+1:]
				if v == "" {
					if i+1 >= len(args) {
						return a, fmt.Sprintf("option requires an argument -- '%c'", c)
					}
					i++
					v = args[i]
				}
				if c != 's' {
					if why := count(v, c); why != "" {
						return a, why
					}
				}
				j = len(arg)
			case c == 'q':
				a.quiet = true
			case c == 'v':
				a.verbose = true
			case (c == 'f' || c == 'F') && name == "tail":
				a.follow = true
			default:
				return a, fmt.Sprintf("invalid option -- '%c'", c)
			}
		}
	}
	return a, ""
}

// progHeadTail is busybox's head and tail over the run's files: the first (head) or last (tail) 10
// lines, -n N lines (head -n -N: all but the last N; tail -n +N: from the Nth), -c N bytes, a
// "==> FILE <==" header before each of several files (-q: none, -v: always), no operand: the
// standard input. tail -f (-F) prints the same, then follows the file until the run is stopped: the
// run runs until stopped (tail -f /dev/null); what others append to it later is not followed, so
// following a file of a volume, which other containers write while the run is interpreted at its
// start, is not honoured.
func progHeadTail(ctx context.Context, r *run, args []string) error {
	name := path.Base(args[0])
	a, why := parseHeadTail(name, args[1:])
	if why != "" {
		return fail(ctx, 1, name, "%s", why)
	}
	hc := interp.HandlerCtx(ctx)
	pick := func(b []byte) []byte {
		if a.bytes {
			switch {
			case name == "head" && a.n >= 0:
				return b[:min(int64(len(b)), a.n)]
			case name == "head":
				return b[:max(0, int64(len(b))+a.n)]
			case a.from:
				return b[min(int64(len(b)), max(a.n-1, 0)):]
			}
			return b[max(0, int64(len(b))-a.n):]
		}
		lines := strings.SplitAfter(string(b), "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		k := int64(len(lines))
		switch {
		case name == "head" && a.n >= 0:
			lines = lines[:min(k, a.n)]
		case name == "head":
			lines = lines[:max(0, k+a.n)]
		case a.from:
			lines = lines[min(k, max(a.n-1, 0)):]
		default:
			lines = lines[max(0, k-a.n):]
		}
		return []byte(strings.Join(lines, ""))
	}
	status := error(nil)
	if len(a.files) == 0 {
		if hc.Stdin != nil {
			b, _ := io.ReadAll(io.LimitReader(hc.Stdin, r.lim.Memory))
			_, _ = hc.Stdout.Write(pick(b))
		}
	}
	header := a.verbose || len(a.files) > 1 && !a.quiet
	for i, f := range a.files {
		fsys, inner, _, err := r.file(ctx, f, false)
		if err != nil {
			return err
		}
		if a.follow && fsys != r.rootfs && fsys != r.devFS() {
			return refuse("runs %s -f %s, following a file of a volume (others write it while the run is interpreted at its start)", name, f)
		}
		h, err := fsys.OpenFile(inner, os.O_RDONLY, 0)
		if err != nil {
			status = fail(ctx, 1, name, "can't open '%s': %s", f, describe(err))
			continue
		}
		b, err := io.ReadAll(io.LimitReader(h, r.lim.Memory))
		_ = h.Close()
		if err != nil {
			status = fail(ctx, 1, name, "%s: %s", f, describe(err))
			continue
		}
		if header {
			if i > 0 {
				fmt.Fprintln(hc.Stdout)
			}
			fmt.Fprintf(hc.Stdout, "==> %s <==\n", f)
		}
		_, _ = hc.Stdout.Write(pick(b))
	}
	if a.follow {
		return errForever
	}
	return status
}

// devFS is the run's /dev as far as programs read it: /dev/null, empty (made at its first use).
func (r *run) devFS() *FS {
	r.devOnce.Do(func() {
		r.dev = NewFS(0)
		_ = r.dev.Touch("/null", r.p.Now)
	})
	return r.dev
}

// progIP is busybox's ip for one command only, adding a link ("ip link add NAME type TYPE"): the
// kernel refuses it to a process without CAP_NET_ADMIN ("ip: RTNETLINK answers: Operation not
// permitted", exit 1, as busybox's rtnl_talk error dies), so an unprivileged container cannot make a
// dummy device (the Security Context conformance spec "privileged: false"); with Program.NetAdmin it
// succeeds silently (the link is not seen by anything later). Any other use of ip is not honoured:
// the pod's network is not known to the simulator.
func progIP(ctx context.Context, r *run, args []string) error {
	if len(args) < 6 || args[1] != "link" || args[2] != "add" || args[4] != "type" {
		return refuse("runs ip %s (only ip link add NAME type TYPE is known)", strings.Join(args[1:], " "))
	}
	if !r.p.NetAdmin {
		return fail(ctx, 1, "ip", "RTNETLINK answers: Operation not permitted")
	}
	return nil
}
