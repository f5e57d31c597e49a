package main

import (
	"math/bits"
	"sync/atomic"
)

// The latency histogram is log-linear over microseconds: exact below 128 µs,
// then 64 buckets per power of two, so a reported percentile is within 1.6 %
// of the true value. Receivers record into one of histShards shards (by
// subscriber) with atomic adds, so the hot path neither locks nor allocates.
const (
	histLinear  = 128
	histSub     = 64
	histBuckets = histLinear + 40*histSub // up to 2^46 µs, far beyond any run
	histShards  = 16
)

type histShard struct {
	counts [histBuckets]atomic.Uint64
	max    atomic.Uint64
	_      [64]byte // keep the next shard's max off this cache line
}

type histogram struct {
	shards [histShards]histShard
}

func bucketOf(us uint64) int {
	if us < histLinear {
		return int(us)
	}
	shift := bits.Len64(us) - 7 // us>>shift is in [64, 127]
	i := histLinear + (shift-1)*histSub + int(us>>shift) - histSub
	if i >= histBuckets {
		i = histBuckets - 1
	}
	return i
}

// bucketMid is the middle of bucket i, in microseconds.
func bucketMid(i int) float64 {
	if i < histLinear {
		return float64(i)
	}
	j := i - histLinear
	shift := j/histSub + 1
	lo := uint64(j%histSub+histSub) << shift
	return float64(lo) + float64(uint64(1)<<shift)/2
}

// record adds one latency of us microseconds to shard s.
func (h *histogram) record(s int, us uint64) {
	sh := &h.shards[s&(histShards-1)]
	sh.counts[bucketOf(us)].Add(1)
	for {
		m := sh.max.Load()
		if us <= m || sh.max.CompareAndSwap(m, us) {
			return
		}
	}
}

// summary merges the shards: the count, the given quantiles (0..1) and the
// maximum, in microseconds.
func (h *histogram) summary(qs ...float64) (n uint64, values []float64, maxUS uint64) {
	var merged [histBuckets]uint64
	for s := range h.shards {
		sh := &h.shards[s]
		for i := range merged {
			c := sh.counts[i].Load()
			merged[i] += c
			n += c
		}
		maxUS = max(maxUS, sh.max.Load())
	}
	values = make([]float64, len(qs))
	if n == 0 {
		return 0, values, 0
	}
	for k, q := range qs {
		rank := uint64(q*float64(n) + 0.5)
		rank = min(max(rank, 1), n)
		var seen uint64
		for i, c := range merged {
			seen += c
			if seen >= rank {
				values[k] = min(bucketMid(i), float64(maxUS))
				break
			}
		}
	}
	return n, values, maxUS
}
