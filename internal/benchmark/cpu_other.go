//go:build !unix

package benchmark

import "time"

// ProcessCPU is not measured on this system.
func ProcessCPU() (time.Duration, bool) { return 0, false }
