// Command etcd is etcd 3.7 built from go.etcd.io/etcd/server/v3 (etcdmain), the version kube-apiserver 1.37 requires.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
