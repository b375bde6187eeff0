// Command pause is the sandbox ("pause") process of a Pod for the local containerd node:
// it holds the Pod's namespaces open and does nothing else. It blocks until SIGTERM or
// SIGINT, then exits 0, and reaps zombies on SIGCHLD (it is PID 1 when the Pod shares its
// process namespace). Built static (CGO_ENABLED=0) into a FROM scratch image; see
// hack/images/README.md.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("kerasjob pause")
		return
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		// One SIGCHLD may stand for several exited children: reap until none is left.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
