package hub

import (
	"strings"
	"testing"
)

func TestNameCharsets(t *testing.T) {
	if !ValidChannelName("AZaz09_-=@,.;") || ValidChannelName("a/b") {
		t.Fatal("channel names: the character set is A-Z a-z 0-9 _ - = @ , . ;")
	}
	for name, want := range map[string]bool{
		"client-x": true, strings.Repeat("e", MaxEventNameLength): true,
		"": false, strings.Repeat("e", MaxEventNameLength+1): false, "pusher:x": false, "pusher_internal:x": false,
	} {
		if got := ValidEventName(name); got != want {
			t.Errorf("ValidEventName(%q) = %v, want %v", name, got, want)
		}
	}
}
