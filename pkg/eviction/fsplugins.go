package eviction

// cadvisor's filesystem stats come from plugins that register themselves on import: vfs covers
// ext4 and xfs, plus overlay (container roots), tmpfs and btrfs, as the kubelet's cadvisor links them.
import (
	_ "github.com/google/cadvisor/lib/fs/btrfs/install"
	_ "github.com/google/cadvisor/lib/fs/overlay/install"
	_ "github.com/google/cadvisor/lib/fs/tmpfs/install"
	_ "github.com/google/cadvisor/lib/fs/vfs/install"
)
