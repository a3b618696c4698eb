// A Go program that allocates through cgo, for go_program.rs: 8 goroutines
// each malloc and free 20000 blocks of 32..131 bytes in C (`grab`), then it
// exits 5 with os.Exit, which ends the process with the exit_group system
// call itself. With an argument, it sleeps 500 ms first (long enough for a
// checkpoint).
package main

/*
#include <stdlib.h>
static void *grab(int n) { return malloc(n); }
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"
)

func main() {
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20000; i++ {
				p := C.grab(C.int(32 + i%100))
				C.free(unsafe.Pointer(p))
			}
		}()
	}
	wg.Wait()
	fmt.Println("go_cgo: done")
	if len(os.Args) > 1 {
		time.Sleep(500 * time.Millisecond)
	}
	os.Exit(5)
}
