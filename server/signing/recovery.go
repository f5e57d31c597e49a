package signing

import "strings"

// RecoveryToken returns the secret that lets a connection recover its
// subscription to channel from position (recovery): "<position>.<hex
// HMAC-SHA256(secret, recovery:socket_id:channel:position)>". Only the
// connection socketID is given it; a new connection proves with it that it
// is that one's successor, from that position on.
func RecoveryToken(secret, socketID, channel, position string) string {
	return position + "." + HMACHex(secret, recoveryMessage(socketID, channel, position))
}

// VerifyRecoveryToken reports whether token is the recovery secret of
// socketID's subscription to channel, and returns the position it was
// given from. The MAC is compared in constant time.
func VerifyRecoveryToken(token, secret, socketID, channel string) (position string, ok bool) {
	// The MAC is hex: the last dot ends the position, whatever it holds.
	i := strings.LastIndexByte(token, '.')
	if i <= 0 {
		return "", false
	}
	position, mac := token[:i], token[i+1:]
	if !equalMAC(mac, secret, recoveryMessage(socketID, channel, position)) {
		return "", false
	}
	return position, true
}

// recoveryMessage is what a recovery token signs. Its prefix keeps it from
// ever being a channel or sign-in signature's message, whose socket ids
// come first.
func recoveryMessage(socketID, channel, position string) string {
	return "recovery:" + socketID + ":" + channel + ":" + position
}
