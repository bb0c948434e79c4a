// Package promreg registers Interlock's Prometheus metrics the one way
// every service does: a refusal is an error, and parts of one process that
// export the same metric share it.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg and returns the collector to use: c, or
// the collector of the same description registered before it (another
// part of the process exporting the same metric, which then counts into
// one). Any other refusal (the name taken with other labels, help or
// type) is an error. A nil reg registers nothing and returns c.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register metrics: %w", err)
}
