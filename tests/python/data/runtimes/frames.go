// A Go program: `renderFrames` makes a 32 MiB buffer 24 times. Go binaries are static and keep
// frame pointers; memcost trace (as root) must name main.renderFrames.
package main

import "fmt"

//go:noinline
func renderFrames(frames, bytes int) int {
	sum := 0
	for f := 0; f < frames; f++ {
		buffer := make([]byte, bytes)
		for i := 0; i < bytes; i += 4096 {
			buffer[i] = byte(f + 1)
		}
		sum += int(buffer[bytes/2])
	}
	return sum
}

func main() {
	fmt.Println(renderFrames(24, 32<<20))
}
