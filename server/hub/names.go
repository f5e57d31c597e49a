package hub

import "strings"

// Kind is the kind of a channel, decided by its name's prefix.
type Kind int

// Channel kinds.
const (
	Public Kind = iota
	Private
	PrivateEncrypted
	Presence
	ServerToUser // #server-to-user-<user id>
)

// Limits on names, shared by the HTTP API and the socket protocol.
const (
	MaxChannelNameLength = 200
	MaxEventNameLength   = 200
	ServerToUserPrefix   = "#server-to-user-"
)

// ChannelKind returns the kind of the channel name and whether it is a cache
// channel (cache-, private-cache-, private-encrypted-cache-, presence-cache-).
func ChannelKind(name string) (kind Kind, cache bool) {
	switch {
	case strings.HasPrefix(name, "private-encrypted-"):
		return PrivateEncrypted, strings.HasPrefix(name, "private-encrypted-cache-")
	case strings.HasPrefix(name, "private-"):
		return Private, strings.HasPrefix(name, "private-cache-")
	case strings.HasPrefix(name, "presence-"):
		return Presence, strings.HasPrefix(name, "presence-cache-")
	case strings.HasPrefix(name, ServerToUserPrefix):
		return ServerToUser, false
	default:
		return Public, strings.HasPrefix(name, "cache-")
	}
}

// IsPresence reports whether name is a presence channel.
func IsPresence(name string) bool { return strings.HasPrefix(name, "presence-") }

// ValidChannelName reports whether name is 1 to 200 characters of
// A-Z a-z 0-9 _ - = @ , . ; optionally after the #server-to-user- prefix.
func ValidChannelName(name string) bool {
	if len(name) == 0 || len(name) > MaxChannelNameLength {
		return false
	}
	rest := strings.TrimPrefix(name, ServerToUserPrefix)
	return rest != "" && NameChars(rest)
}

// NameChars reports whether every byte of s is one of A-Z a-z 0-9 _ - = @ , . ;
// the character set Pusher uses for channel names and Beams for interest
// names.
func NameChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if !channelChar[s[i]] {
			return false
		}
	}
	return true
}

var channelChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "_-=@,.;" {
		t[c] = true
	}
	return t
}()

// ValidEventName reports whether an event name may be triggered: 1 to 200
// bytes, not in the pusher: or pusher_internal: namespaces the protocol owns.
func ValidEventName(name string) bool {
	return len(name) > 0 && len(name) <= MaxEventNameLength &&
		!strings.HasPrefix(name, "pusher:") && !strings.HasPrefix(name, "pusher_internal:")
}
