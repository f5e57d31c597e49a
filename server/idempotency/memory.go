package idempotency

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Memory is the Store of one node: the keys of each scope in a map, with
// their order of arrival to forget the oldest first. Nothing survives a
// restart, which for a Channels trigger (itself not kept) loses nothing a
// client could tell.
type Memory struct {
	maxKeys  int
	maxBytes int
	lock     time.Duration

	mu     sync.Mutex
	scopes map[string]*memScope

	keys    atomic.Int64  // keys held over every scope
	evicted atomic.Uint64 // keys forgotten before their time to make room
}

// memScope is one scope's keys: a map, and a list of its entries in the
// order they were claimed, oldest first (every key shares one TTL, so also
// by expiry). The list is threaded through the entries themselves: one
// allocation per key.
type memScope struct {
	keys        map[string]*memEntry
	front, back *memEntry
	n           int
	bytes       int // KeyCost of every key
}

type memEntry struct {
	key, token string
	expires    time.Time // while unfinished, the claim's end; once done, the key's
	entry      Entry
	prev, next *memEntry
}

// pushBack appends e as the newest entry.
func (s *memScope) pushBack(e *memEntry) {
	e.prev, e.next = s.back, nil
	if s.back != nil {
		s.back.next = e
	} else {
		s.front = e
	}
	s.back = e
	s.keys[e.key] = e
	s.n++
	s.bytes += e.cost()
}

// cost is what e counts against Options.MaxBytes.
func (e *memEntry) cost() int { return KeyCost(e.key, len(e.entry.Response.Body)) }

// unlink takes e out of the scope.
func (s *memScope) unlink(e *memEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.front = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.back = e.prev
	}
	e.prev, e.next = nil, nil
	delete(s.keys, e.key)
	s.n--
	s.bytes -= e.cost()
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store keeping at most opts.MaxKeys keys and
// opts.MaxBytes per scope, an unfinished claim for at most opts.Lock.
func NewMemory(opts Options) *Memory {
	opts = opts.WithDefaults()
	return &Memory{maxKeys: opts.MaxKeys, maxBytes: opts.MaxBytes, lock: opts.Lock, scopes: map[string]*memScope{}}
}

// Begin implements Store.
func (m *Memory) Begin(_ context.Context, c Claim, fp Fingerprint, now time.Time) (*Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.scopes[c.Scope]
	if s == nil {
		s = &memScope{keys: map[string]*memEntry{}}
		m.scopes[c.Scope] = s
	}
	m.expire(s, now)
	if me, ok := s.keys[c.Key]; ok {
		if now.Before(me.expires) {
			e := me.entry // a copy: the caller reads it unlocked
			return &e, nil
		}
		// An expired claim deeper in the list than expire looks.
		m.remove(s, me)
	}
	for s.front != nil && (s.n >= m.maxKeys || s.bytes+KeyCost(c.Key, 0) > m.maxBytes) {
		m.evict(s)
	}
	s.pushBack(&memEntry{key: c.Key, token: c.Token, expires: c.LockEnd(now, m.lock), entry: Entry{Fingerprint: fp}})
	m.keys.Add(1)
	return nil, nil
}

// evict forgets s's oldest key before its time, to make room.
func (m *Memory) evict(s *memScope) {
	m.remove(s, s.front)
	m.evicted.Add(1)
}

// Complete implements Store. It keeps res.Body itself, not a copy.
func (m *Memory) Complete(_ context.Context, c Claim, res Response) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.claimed(c); e != nil {
		s := m.scopes[c.Scope]
		s.bytes -= e.cost()
		e.entry.Done, e.entry.Response = true, res
		e.expires = c.Expires
		s.bytes += e.cost()
		for s.bytes > m.maxBytes {
			m.evict(s)
		}
	}
	return nil
}

// Release implements Store.
func (m *Memory) Release(_ context.Context, c Claim) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.claimed(c); e != nil {
		m.remove(m.scopes[c.Scope], e)
	}
	return nil
}

// claimed returns the entry of c's key if c still holds it.
func (m *Memory) claimed(c Claim) *memEntry {
	s := m.scopes[c.Scope]
	if s == nil {
		return nil
	}
	if e, ok := s.keys[c.Key]; ok && e.token == c.Token {
		return e
	}
	return nil
}

// Sweep forgets every expired key, and the scopes left empty; the node
// calls it now and then so that the keys of a scope no request comes to any
// more do not stay for good.
func (m *Memory) Sweep(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, s := range m.scopes {
		m.expire(s, now)
		if s.n == 0 {
			delete(m.scopes, name)
		}
	}
}

// Len is the number of keys held.
func (m *Memory) Len() int { return int(m.keys.Load()) }

// Evicted is how many keys were forgotten before their time to make room
// for newer ones in a full scope.
func (m *Memory) Evicted() uint64 { return m.evicted.Load() }

// expire forgets s's expired keys, from the oldest. Keys are in the order
// they were claimed, and a done key expires a TTL after that, so this finds
// every expired done key; an expired unfinished claim further in is found
// when its key is asked for, or when it reaches the front.
func (m *Memory) expire(s *memScope, now time.Time) {
	for s.front != nil && !now.Before(s.front.expires) {
		m.remove(s, s.front)
	}
}

func (m *Memory) remove(s *memScope, e *memEntry) {
	s.unlink(e)
	m.keys.Add(-1)
}
