// Command etcd is etcd's server, v3.5.10 as kubernetes v1.30.2's go.mod names it: the same
// entry point as etcd's own main package (go.etcd.io/etcd/v3, whose module the proxy would also
// serve), linked here so that one go.sum covers the whole control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
