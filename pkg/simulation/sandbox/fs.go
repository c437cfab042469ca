package sandbox

import (
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FS is an in-memory file system: what a simulated volume holds (an emptyDir per pod, the host file
// system of a simulated Node for its hostPath volumes). Paths are slash-separated and absolute within
// the FS ("/" its root). Its size (file contents, plus entryCost bytes per entry) is bounded by
// maxBytes: a write past it fails with ENOSPC, as on a full disk. Safe for concurrent use.
type FS struct {
	maxBytes int64

	mu    sync.Mutex
	nodes map[string]*fsNode
	size  int64
	rec   *recorder // records the changes (Record); nil: none
	// gone are the paths removed (or renamed away) and not made again: a container's layer knows them
	// not to exist, where a path it never had may be a file of the image (Known).
	gone  map[string]bool
	layer bool
}

// NewLayer returns an empty FS of at most maxBytes that is a container's own layer: it knows the paths
// removed from it (Known), at most one per change its Timeline holds.
func NewLayer(maxBytes int64) *FS {
	f := NewFS(maxBytes)
	f.layer = true
	return f
}

// Known reports whether name is a file or directory of the FS, or one removed from it (it, or a
// directory above it): what the FS knows of, where any other path of a container's layer may be a
// file of its image.
func (f *FS) Known(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := clean(name)
	if _, ok := f.nodes[p]; ok {
		return true
	}
	for ; ; p = path.Dir(p) {
		if f.gone[p] {
			return true
		}
		if p == "/" {
			return false
		}
	}
}

// forget marks p removed (f.mu held), in a container's layer only (NewLayer).
func (f *FS) forget(p string) {
	if !f.layer {
		return
	}
	if f.gone == nil {
		f.gone = map[string]bool{}
	}
	f.gone[p] = true
}

type fsNode struct {
	dir  bool
	data []byte
	mod  time.Time
}

// entryCost is what one file or directory counts towards an FS's size beyond its contents.
const entryCost = 64

// DefaultFSBytes is an FS's size when NewFS is given none: 1 MiB.
const DefaultFSBytes = 1 << 20

// NewFS returns an empty FS (only its root directory) of at most maxBytes (≤ 0: DefaultFSBytes).
func NewFS(maxBytes int64) *FS {
	if maxBytes <= 0 {
		maxBytes = DefaultFSBytes
	}
	return &FS{maxBytes: maxBytes, nodes: map[string]*fsNode{"/": {dir: true}}}
}

// Size returns the bytes the FS holds (contents and entries).
func (f *FS) Size() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.size
}

// Exists reports whether name is a file or directory of the FS.
func (f *FS) Exists(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.nodes[clean(name)]
	return ok
}

func clean(name string) string { return path.Clean("/" + name) }

func pathErr(op, name string, err error) error { return &fs.PathError{Op: op, Path: name, Err: err} }

// MkdirAll makes the directory name and its parents.
func (f *FS) MkdirAll(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mkdirAll(clean(name))
}

func (f *FS) mkdirAll(p string) error {
	if n, ok := f.nodes[p]; ok {
		if !n.dir {
			return pathErr("mkdir", p, syscall.ENOTDIR)
		}
		return nil
	}
	if err := f.mkdirAll(path.Dir(p)); err != nil {
		return err
	}
	if f.size+entryCost > f.maxBytes || !f.record(change{op: opMkdir, name: p}) {
		return pathErr("mkdir", p, syscall.ENOSPC)
	}
	f.nodes[p] = &fsNode{dir: true}
	f.size += entryCost
	return nil
}

// Mkdir makes the directory name, whose parent must exist.
func (f *FS) Mkdir(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := clean(name)
	if _, ok := f.nodes[p]; ok {
		return pathErr("mkdir", p, fs.ErrExist)
	}
	if parent, ok := f.nodes[path.Dir(p)]; !ok || !parent.dir {
		return pathErr("mkdir", p, fs.ErrNotExist)
	}
	return f.mkdirAll(p)
}

// Remove removes a file or an empty directory; all, everything under a directory too.
func (f *FS) Remove(name string, all bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := clean(name)
	n, ok := f.nodes[p]
	if !ok {
		return pathErr("remove", p, fs.ErrNotExist)
	}
	if p == "/" {
		return pathErr("remove", p, syscall.EBUSY)
	}
	op := opRemove
	if all {
		op = opRemoveAll
	}
	if n.dir {
		children := f.under(p)
		if len(children) > 0 && !all {
			return pathErr("remove", p, syscall.ENOTEMPTY)
		}
		if !f.record(change{op: op, name: p}) {
			return pathErr("remove", p, syscall.ENOSPC)
		}
		for _, c := range children {
			f.size -= entryCost + int64(len(f.nodes[c].data))
			delete(f.nodes, c)
		}
	}
	if !n.dir && !f.record(change{op: op, name: p}) {
		return pathErr("remove", p, syscall.ENOSPC)
	}
	f.size -= entryCost + int64(len(n.data))
	delete(f.nodes, p)
	f.forget(p)
	return nil
}

// under returns every path below directory p.
func (f *FS) under(p string) []string {
	prefix := strings.TrimSuffix(p, "/") + "/"
	var out []string
	for k := range f.nodes {
		if k != p && strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// Stat returns name's information.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := clean(name)
	n, ok := f.nodes[p]
	if !ok {
		return nil, pathErr("stat", p, fs.ErrNotExist)
	}
	return fileInfo{name: path.Base(p), size: int64(len(n.data)), dir: n.dir, mod: n.mod}, nil
}

// ReadDir returns the entries of directory name, sorted by name.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := clean(name)
	n, ok := f.nodes[p]
	if !ok {
		return nil, pathErr("open", p, fs.ErrNotExist)
	}
	if !n.dir {
		return nil, pathErr("readdirent", p, syscall.ENOTDIR)
	}
	var out []fs.DirEntry
	for _, c := range f.under(p) {
		if path.Dir(c) == p {
			cn := f.nodes[c]
			out = append(out, fs.FileInfoToDirEntry(fileInfo{name: path.Base(c), size: int64(len(cn.data)), dir: cn.dir, mod: cn.mod}))
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// Touch creates the file name when absent (its parent must exist) and sets its modification time.
func (f *FS) Touch(name string, now time.Time) error {
	h, err := f.OpenFile(name, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	f.mu.Lock()
	if n := f.nodes[clean(name)]; n != nil && f.record(change{op: opTouch, name: clean(name), mod: now}) {
		n.mod = now
	}
	f.mu.Unlock()
	return h.Close()
}

// OpenFile opens name with os.OpenFile's flags (O_RDONLY, O_WRONLY, O_RDWR, O_CREATE, O_EXCL,
// O_TRUNC, O_APPEND); perm is ignored.
func (f *FS) OpenFile(name string, flag int, _ os.FileMode) (io.ReadWriteCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := clean(name)
	n, ok := f.nodes[p]
	switch {
	case ok && n.dir:
		if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
			return nil, pathErr("open", p, syscall.EISDIR)
		}
		return nil, pathErr("read", p, syscall.EISDIR)
	case ok && flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0:
		return nil, pathErr("open", p, fs.ErrExist)
	case !ok && flag&os.O_CREATE == 0:
		return nil, pathErr("open", p, fs.ErrNotExist)
	case !ok:
		parent, pok := f.nodes[path.Dir(p)]
		if !pok {
			return nil, pathErr("open", p, fs.ErrNotExist)
		}
		if !parent.dir {
			return nil, pathErr("open", p, syscall.ENOTDIR)
		}
		if f.size+entryCost > f.maxBytes || !f.record(change{op: opCreate, name: p}) {
			return nil, pathErr("open", p, syscall.ENOSPC)
		}
		n = &fsNode{}
		f.nodes[p] = n
		f.size += entryCost
	}
	if flag&os.O_TRUNC != 0 && flag&(os.O_WRONLY|os.O_RDWR) != 0 && len(n.data) > 0 {
		if !f.record(change{op: opTruncate, name: p}) {
			return nil, pathErr("open", p, syscall.ENOSPC)
		}
		f.size -= int64(len(n.data))
		n.data = nil
	}
	return &fsHandle{fs: f, node: n, name: p, flag: flag}, nil
}

// fsHandle is an open file of an FS: reads from the start, writes at the end (a shell's redirections
// only ever truncate or append).
type fsHandle struct {
	fs   *FS
	node *fsNode
	name string
	flag int
	off  int
}

func (h *fsHandle) Read(b []byte) (int, error) {
	if h.flag&os.O_WRONLY != 0 {
		return 0, pathErr("read", h.name, syscall.EBADF)
	}
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.off >= len(h.node.data) {
		return 0, io.EOF
	}
	n := copy(b, h.node.data[h.off:])
	h.off += n
	return n, nil
}

func (h *fsHandle) Write(b []byte) (int, error) {
	if h.flag&(os.O_WRONLY|os.O_RDWR) == 0 {
		return 0, pathErr("write", h.name, syscall.EBADF)
	}
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.fs.size+int64(len(b)) > h.fs.maxBytes {
		return 0, pathErr("write", h.name, syscall.ENOSPC)
	}
	if len(b) > 0 && !h.fs.record(change{op: opAppend, name: h.name, data: append([]byte(nil), b...)}) {
		return 0, pathErr("write", h.name, syscall.ENOSPC)
	}
	h.node.data = append(h.node.data, b...)
	h.fs.size += int64(len(b))
	return len(b), nil
}

func (h *fsHandle) Close() error { return nil }

type fileInfo struct {
	name string
	size int64
	dir  bool
	mod  time.Time
}

func (i fileInfo) Name() string { return i.name }
func (i fileInfo) Size() int64  { return i.size }
func (i fileInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}
func (i fileInfo) ModTime() time.Time { return i.mod }
func (i fileInfo) IsDir() bool        { return i.dir }
func (i fileInfo) Sys() any           { return nil }

// Rename moves the file or directory oldName (with everything under it) to newName, whose parent
// must be a directory; an existing newName is replaced when both are files (as rename(2)), else the
// error says why.
func (f *FS) Rename(oldName, newName string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	op, np := clean(oldName), clean(newName)
	n, ok := f.nodes[op]
	switch {
	case !ok:
		return pathErr("rename", op, fs.ErrNotExist)
	case op == "/":
		return pathErr("rename", op, syscall.EBUSY)
	case op == np:
		return nil
	case strings.HasPrefix(np, op+"/"):
		return pathErr("rename", np, syscall.EINVAL)
	}
	if parent, pok := f.nodes[path.Dir(np)]; !pok || !parent.dir {
		return pathErr("rename", np, fs.ErrNotExist)
	}
	old, exists := f.nodes[np]
	if exists && (old.dir || n.dir) {
		return pathErr("rename", np, fs.ErrExist)
	}
	if !f.record(change{op: opRename, name: op, target: np}) {
		return pathErr("rename", np, syscall.ENOSPC)
	}
	if exists {
		f.size -= entryCost + int64(len(old.data))
		delete(f.nodes, np)
	}
	moved := map[string]*fsNode{np: n}
	if n.dir {
		for _, c := range f.under(op) {
			moved[np+strings.TrimPrefix(c, op)] = f.nodes[c]
			delete(f.nodes, c)
		}
	}
	delete(f.nodes, op)
	f.forget(op)
	for k, v := range moved {
		f.nodes[k] = v
	}
	return nil
}
