package signing

import "strings"

// ChannelAuth returns the auth string a client sends to subscribe to a private
// or presence channel: "<key>:<hex HMAC-SHA256(secret, socket_id:channel[:channel_data])>".
// channelData is empty for private channels.
func ChannelAuth(key, secret, socketID, channel, channelData string) string {
	msg := socketID + ":" + channel
	if channelData != "" {
		msg += ":" + channelData
	}
	return key + ":" + HMACHex(secret, msg)
}

// UserAuth returns the auth string of a pusher:signin:
// "<key>:<hex HMAC-SHA256(secret, socket_id::user::user_data)>".
func UserAuth(key, secret, socketID, userData string) string {
	return key + ":" + HMACHex(secret, socketID+"::user::"+userData)
}

// VerifyChannelAuth reports whether auth authorizes socketID on channel (with
// channelData for presence channels) for the app with key and secret. The MAC is
// compared in constant time.
func VerifyChannelAuth(auth, key, secret, socketID, channel, channelData string) bool {
	msg := socketID + ":" + channel
	if channelData != "" {
		msg += ":" + channelData
	}
	return verifyAuth(auth, key, secret, msg)
}

// VerifyUserAuth reports whether auth is a valid sign-in signature of userData
// for socketID.
func VerifyUserAuth(auth, key, secret, socketID, userData string) bool {
	return verifyAuth(auth, key, secret, socketID+"::user::"+userData)
}

func verifyAuth(auth, key, secret, message string) bool {
	gotKey, sig, ok := strings.Cut(auth, ":")
	if !ok || gotKey != key {
		return false
	}
	return equalMAC(sig, secret, message)
}
