// Command pause is the lab's sandbox ("infra") container process: it holds the Pod's
// namespaces open, reaps orphaned children (it is PID 1 of the sandbox) and exits 0 on
// SIGINT or SIGTERM. Written for the project; it has no dependencies beyond the Go runtime.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
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
