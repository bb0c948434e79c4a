package notifier

import (
	dto "github.com/prometheus/client_model/go"
)

// dtoCounter reads one counter's value.
type dtoCounter struct{ m dto.Metric }

func (d *dtoCounter) metric() *dto.Metric { return &d.m }

func (d *dtoCounter) value() float64 {
	if d.m.Counter == nil {
		return 0
	}
	return d.m.Counter.GetValue()
}
