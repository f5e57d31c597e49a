package hub

import "iter"

// smallSubscriptions is how many channels a connection holds in a slice
// before its subscriptions move to a map.
const smallSubscriptions = 8

// subscriptions is one connection's channels, by name. Most connections hold
// one or a few: up to smallSubscriptions they sit in a slice searched in
// order (24 bytes an entry), beyond in a map. A map costs about 250 bytes for
// its first entry alone (its first group of slots), 5 % of what a parked
// connection holds in all. The connection's subMu guards it.
type subscriptions struct {
	few  []namedSub
	many map[string]*subscription // nil until more than smallSubscriptions
}

// namedSub is one entry of subscriptions.
type namedSub struct {
	name string
	sub  *subscription
}

// get returns the subscription to the channel called name, or nil.
func (s *subscriptions) get(name string) *subscription {
	if s.many != nil {
		return s.many[name]
	}
	for i := range s.few {
		if s.few[i].name == name {
			return s.few[i].sub
		}
	}
	return nil
}

// set adds the subscription to name, or replaces it.
func (s *subscriptions) set(name string, sub *subscription) {
	if s.many != nil {
		s.many[name] = sub
		return
	}
	for i := range s.few {
		if s.few[i].name == name {
			s.few[i].sub = sub
			return
		}
	}
	if len(s.few) < smallSubscriptions {
		s.few = append(s.few, namedSub{name, sub})
		return
	}
	s.many = make(map[string]*subscription, 2*smallSubscriptions)
	for _, e := range s.few {
		s.many[e.name] = e.sub
	}
	s.many[name] = sub
	s.few = nil
}

// remove drops the subscription to name, if any.
func (s *subscriptions) remove(name string) {
	if s.many != nil {
		delete(s.many, name)
		return
	}
	for i := range s.few {
		if s.few[i].name == name {
			last := len(s.few) - 1
			s.few[i] = s.few[last]
			s.few[last] = namedSub{}
			s.few = s.few[:last]
			return
		}
	}
}

// len is the number of subscriptions.
func (s *subscriptions) len() int {
	if s.many != nil {
		return len(s.many)
	}
	return len(s.few)
}

// all yields every subscription, in no particular order. The set must not
// change meanwhile; takeAll empties it for a caller that goes through them
// to leave them.
func (s *subscriptions) all() iter.Seq2[string, *subscription] {
	return func(yield func(string, *subscription) bool) {
		if s.many != nil {
			for name, sub := range s.many {
				if !yield(name, sub) {
					return
				}
			}
			return
		}
		for _, e := range s.few {
			if !yield(e.name, e.sub) {
				return
			}
		}
	}
}

// takeAll empties the set and returns what it held.
func (s *subscriptions) takeAll() []namedSub {
	if s.many == nil {
		out := s.few
		s.few = nil
		return out
	}
	out := make([]namedSub, 0, len(s.many))
	for name, sub := range s.many {
		out = append(out, namedSub{name, sub})
	}
	s.many = nil
	return out
}
