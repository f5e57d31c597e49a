package traffic

import "testing"

// BenchmarkCount is the cost a webhook attempt or push delivery
// pays to be counted, on many goroutines at once.
func BenchmarkCount(b *testing.B) {
	r := New(Sources{}, Options{})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Count(App, "42", AppWebhooksSent, 1)
		}
	})
}

// BenchmarkSample is one sample with 1000 apps tracked and counted.
func BenchmarkSample(b *testing.B) {
	readings := make([]AppReading, DefaultMaxKeys)
	for i := range readings {
		readings[i] = AppReading{AppID: string(rune('a'+i%26)) + string(rune(i)), Connections: i}
	}
	r := New(Sources{Apps: func() []AppReading { return readings }}, Options{})
	now := t0
	for b.Loop() {
		for _, a := range readings {
			r.Count(App, a.AppID, AppWebhooksSent, 1)
		}
		now = now.Add(DefaultInterval)
		r.Sample(now)
	}
}
