// Command podimage is the one process of the images the pod fidelity test (test/integration,
// TestPodFidelity) runs on the reference kubelet: built static (CGO_ENABLED=0) into a one-layer OCI
// image by framework.BuildPodImages, it is both the pod sandbox ("pause") image and the containers'.
//
//	podimage                               runs until SIGTERM or SIGINT, then exits 0 at once
//	podimage --exit-after=1s --exit-code=1 runs 1 s, then exits 1 (SIGTERM before that: exit 0)
//	podimage --stop-after=1s               on SIGTERM, exits 0 only 1 s later (a graceful stop that takes time)
//	podimage --stop-after=-1s              ignores SIGTERM: only SIGKILL ends it (exit 137), as a PID 1 without a handler
//
// The flags may also come from the environment (PODIMAGE_EXIT_AFTER, PODIMAGE_EXIT_CODE); a flag wins.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	after := flag.Duration("exit-after", envDuration("PODIMAGE_EXIT_AFTER"), "exit after this long (0: run until SIGTERM)")
	code := flag.Int("exit-code", envInt("PODIMAGE_EXIT_CODE"), "the exit code after --exit-after")
	stopAfter := flag.Duration("stop-after", 0, "on SIGTERM or SIGINT, exit 0 this long after it (negative: ignore them)")
	flag.Parse()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var timer <-chan time.Time
	if *after > 0 {
		timer = time.After(*after)
	}
	for {
		select {
		case s := <-sig:
			if *stopAfter < 0 {
				fmt.Printf("podimage: %v: ignored\n", s)
				continue
			}
			fmt.Printf("podimage: %v: exiting 0 after %v\n", s, *stopAfter)
			time.Sleep(*stopAfter)
			os.Exit(0)
		case <-timer:
			fmt.Printf("podimage: %v passed: exiting %d\n", *after, *code)
			os.Exit(*code)
		}
	}
}

func envDuration(key string) time.Duration {
	d, err := time.ParseDuration(os.Getenv(key))
	if err != nil {
		return 0
	}
	return d
}

func envInt(key string) int {
	n, err := strconv.Atoi(os.Getenv(key))
	if err != nil {
		return 0
	}
	return n
}
