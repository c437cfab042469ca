// Command etcd is etcd 3.6 built from go.etcd.io/etcd/server/v3 (etcdmain), the version kube-apiserver 1.34 was released with.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
