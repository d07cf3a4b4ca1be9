// Command pause is the kube bed's pod sandbox image (issue 37): no registry is reachable here, so
// the image containerd's CRI plugin names as sandbox_image is built locally from this program.
// A sandbox's first process holds the pod's namespaces open: it sleeps until SIGINT or SIGTERM
// (then exits 0) and, as PID 1 of a pod sharing its PID namespace, reaps orphaned children.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if os.Getpid() != 1 {
		os.Stderr.WriteString("pause: warning: not PID 1\n")
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
