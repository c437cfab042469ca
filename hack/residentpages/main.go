// Command residentpages says which parts of a running Go binary are resident: it reads the process's
// mappings of its own executable (/proc/PID/maps), which of their pages are present (/proc/PID/pagemap,
// bit 63), and gives each present page's 4096 bytes to the ELF symbols that cover it, in proportion to
// the bytes each covers (bytes no symbol covers go to the section). It prints resident KiB by section and
// by the symbols' package, grouped to -depth path elements, largest first:
//
//	residentpages -pid $(pidof nodeagent) -depth 3 -top 40
//
// It needs the binary's symbol table (not stripped) and root, or the process's own user, for pagemap.
// Its figures count what the kernel mapped, not what the process touched: with the binary in the page
// cache, a fault maps the 64 KiB around the touched page (fault-around), so a package is charged for its
// neighbours' pages too.
package main

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const pageSize = 4096

type sym struct {
	start, end uint64
	pkg        string
}

func main() {
	pid := flag.Int("pid", 0, "process to read (required)")
	depth := flag.Int("depth", 3, "path elements of a package kept in its group (k8s.io/client-go/kubernetes: 3)")
	top := flag.Int("top", 40, "groups printed")
	flag.Parse()
	if *pid <= 0 {
		fmt.Fprintln(os.Stderr, "residentpages: -pid is required")
		os.Exit(2)
	}
	if err := run(*pid, *depth, *top); err != nil {
		fmt.Fprintln(os.Stderr, "residentpages:", err)
		os.Exit(1)
	}
}

func run(pid, depth, top int) error {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return fmt.Errorf("reading the executable of pid %d: %w", pid, err)
	}
	f, err := elf.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return fmt.Errorf("opening %s: %w", exe, err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return fmt.Errorf("symbols of %s (stripped?): %w", exe, err)
	}
	var ss []sym
	for _, s := range syms {
		if s.Size == 0 || s.Value == 0 {
			continue
		}
		ss = append(ss, sym{s.Value, s.Value + s.Size, group(s.Name, depth)})
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].start < ss[j].start })

	ranges, err := exeMappings(pid, exe)
	if err != nil {
		return err
	}
	bias, err := loadBias(f, ranges[0])
	if err != nil {
		return fmt.Errorf("%s: %w", exe, err)
	}
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return fmt.Errorf("opening pagemap of pid %d: %w", pid, err)
	}
	defer pm.Close()

	bySection := map[string]float64{}
	byGroup := map[string]float64{}
	var total float64
	for _, r := range ranges {
		for va := r.start; va < r.end; va += pageSize {
			present, err := pagePresent(pm, va)
			if err != nil {
				return err
			}
			if !present {
				continue
			}
			total += pageSize
			addr := va - bias // the ELF virtual address of this page
			sec := sectionOf(f, addr)
			bySection[sec] += pageSize
			covered := attribute(ss, addr, addr+pageSize, byGroup)
			if covered < pageSize {
				byGroup["("+sec+", no symbol)"] += float64(pageSize - covered)
			}
		}
	}
	fmt.Printf("%s (pid %d): %.1f MiB of its executable resident\n\nby section:\n", exe, pid, total/(1<<20))
	printTop(bySection, len(bySection))
	fmt.Printf("\nby package (depth %d):\n", depth)
	printTop(byGroup, top)
	return nil
}

// attribute adds to byGroup each symbol's share of [lo, hi) and returns the bytes the symbols covered.
func attribute(ss []sym, lo, hi uint64, byGroup map[string]float64) uint64 {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].end > lo })
	var covered uint64
	for ; i < len(ss) && ss[i].start < hi; i++ {
		s, e := max(ss[i].start, lo), min(ss[i].end, hi)
		if e > s {
			byGroup[ss[i].pkg] += float64(e - s)
			covered += e - s
		}
	}
	return min(covered, hi-lo)
}

type mapping struct{ start, end, off uint64 }

// loadBias returns what the kernel added to the ELF's virtual addresses when it mapped it: 0 for a Go
// executable built as usual (not position-independent), the load address for one that is.
func loadBias(f *elf.File, first mapping) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			return first.start - first.off - (p.Vaddr - p.Off), nil
		}
	}
	return 0, fmt.Errorf("no PT_LOAD program header")
}

// exeMappings returns the process's mappings of exe in address order, each with its file offset.
func exeMappings(pid int, exe string) ([]mapping, error) {
	mf, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("opening maps of pid %d: %w", pid, err)
	}
	defer mf.Close()
	var out []mapping
	sc := bufio.NewScanner(io.LimitReader(mf, 16<<20))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || filepath.Clean(fields[5]) != exe {
			continue
		}
		se := strings.SplitN(fields[0], "-", 2)
		start, err1 := strconv.ParseUint(se[0], 16, 64)
		end, err2 := strconv.ParseUint(se[1], 16, 64)
		off, err3 := strconv.ParseUint(fields[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("maps line %q: not an address range and offset", sc.Text())
		}
		out = append(out, mapping{start, end, off})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading maps of pid %d: %w", pid, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pid %d maps nothing of %s", pid, exe)
	}
	return out, nil
}

func pagePresent(pm *os.File, va uint64) (bool, error) {
	var b [8]byte
	if _, err := pm.ReadAt(b[:], int64(va/pageSize*8)); err != nil {
		return false, fmt.Errorf("pagemap at %#x: %w", va, err)
	}
	return binary.LittleEndian.Uint64(b[:])&(1<<63) != 0, nil
}

func sectionOf(f *elf.File, addr uint64) string {
	for _, s := range f.Sections {
		if s.Addr != 0 && addr >= s.Addr && addr < s.Addr+s.Size {
			return s.Name
		}
	}
	return "(between sections)"
}

// group names a symbol's package, cut to depth path elements: "k8s.io/api/core/v1.(*Pod).Marshal" →
// "k8s.io/api/core" at depth 3; type descriptors (type:*k8s.io/...) count for their package; the
// runtime's and the linker's own symbols (go:string.*, go:itab.*, runtime.*) keep their prefix.
func group(name string, depth int) string {
	name = strings.TrimPrefix(name, "type:")
	name = strings.TrimLeft(name, "*[]")
	if strings.HasPrefix(name, "go:") {
		if i := strings.IndexAny(name, ".*"); i > 0 {
			return name[:i]
		}
		return name
	}
	slash := strings.LastIndex(name, "/")
	dot := strings.Index(name[slash+1:], ".")
	pkg := name
	if dot >= 0 {
		pkg = name[:slash+1+dot]
	}
	parts := strings.Split(pkg, "/")
	if len(parts) > depth {
		parts = parts[:depth]
	}
	return strings.Join(parts, "/")
}

func printTop(m map[string]float64, n int) {
	type kv struct {
		k string
		v float64
	}
	var l []kv
	for k, v := range m {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v > l[j].v })
	for i, e := range l {
		if i == n {
			break
		}
		fmt.Printf("%9.0f KiB  %s\n", e.v/1024, e.k)
	}
}
