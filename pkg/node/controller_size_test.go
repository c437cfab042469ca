// The size classes below are those of 64-bit platforms: the test is built only there.

//go:build amd64 || arm64 || ppc64 || ppc64le || s390x || riscv64 || loong64 || mips64 || mips64le

package node

import (
	"testing"
	"unsafe"
)

// TestControllerSize: a Controller, one per Node and most of what a Node holds before it runs
// (BenchmarkNodeHeap in pkg/simulation), stays in the 896-byte size class: its size plus the 8-byte
// header the Go allocator puts before an object of more than 512 bytes with pointers. The next class
// is 1024 bytes: a field that crosses the bound costs every Node 128 bytes. Keep what only some Nodes
// use behind a pointer (as nodePods, for the Nodes that run pods), or raise the bound knowingly.
func TestControllerSize(t *testing.T) {
	const sizeClass, mallocHeader = 896, 8
	if size := unsafe.Sizeof(Controller{}); size+mallocHeader > sizeClass {
		t.Errorf("Controller is %d bytes, %d with the allocator's header: over the %d-byte size class", size, size+mallocHeader, sizeClass)
	}
}
