package idempotency

import (
	"container/list"
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
	maxKeys int
	lock    time.Duration

	mu     sync.Mutex
	scopes map[string]*memScope

	keys    atomic.Int64  // keys held over every scope
	evicted atomic.Uint64 // keys forgotten before their time to make room
}

type memScope struct {
	keys  map[string]*list.Element // of *memEntry
	order list.List                // oldest first; every entry shares one TTL, so also by expiry
}

type memEntry struct {
	key, token string
	expires    time.Time // while unfinished, the claim's end; once done, the key's
	entry      Entry
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store keeping at most opts.MaxKeys keys per
// scope, an unfinished claim for at most opts.Lock.
func NewMemory(opts Options) *Memory {
	opts = opts.WithDefaults()
	return &Memory{maxKeys: opts.MaxKeys, lock: opts.Lock, scopes: map[string]*memScope{}}
}

// Begin implements Store.
func (m *Memory) Begin(_ context.Context, c Claim, fp Fingerprint, now time.Time) (*Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.scopes[c.Scope]
	if s == nil {
		s = &memScope{keys: map[string]*list.Element{}}
		m.scopes[c.Scope] = s
	}
	m.expire(s, now)
	if el, ok := s.keys[c.Key]; ok {
		me := el.Value.(*memEntry)
		if now.Before(me.expires) {
			e := me.entry // a copy: the caller reads it unlocked
			return &e, nil
		}
		// An expired claim deeper in the list than expire looks.
		m.remove(s, el)
	}
	for s.order.Len() >= m.maxKeys {
		m.remove(s, s.order.Front())
		m.evicted.Add(1)
	}
	s.keys[c.Key] = s.order.PushBack(&memEntry{key: c.Key, token: c.Token, expires: c.LockEnd(now, m.lock), entry: Entry{Fingerprint: fp}})
	m.keys.Add(1)
	return nil, nil
}

// Complete implements Store.
func (m *Memory) Complete(_ context.Context, c Claim, res Response) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.claimed(c); e != nil {
		e.entry.Done, e.entry.Response = true, Response{Status: res.Status, Body: append([]byte(nil), res.Body...)}
		e.expires = c.Expires
	}
	return nil
}

// Release implements Store.
func (m *Memory) Release(_ context.Context, c Claim) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.claimed(c) != nil {
		s := m.scopes[c.Scope]
		m.remove(s, s.keys[c.Key])
	}
	return nil
}

// claimed returns the entry of c's key if c still holds it.
func (m *Memory) claimed(c Claim) *memEntry {
	s := m.scopes[c.Scope]
	if s == nil {
		return nil
	}
	el, ok := s.keys[c.Key]
	if !ok {
		return nil
	}
	if e := el.Value.(*memEntry); e.token == c.Token {
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
		if s.order.Len() == 0 {
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
	for el := s.order.Front(); el != nil && !now.Before(el.Value.(*memEntry).expires); el = s.order.Front() {
		m.remove(s, el)
	}
}

func (m *Memory) remove(s *memScope, el *list.Element) {
	delete(s.keys, el.Value.(*memEntry).key)
	s.order.Remove(el)
	m.keys.Add(-1)
}
