package hub

// CloseReason is why the server ends a connection: sent to the client as a
// pusher:error event and as the WebSocket close code, because pusher-js decides
// from the close code whether to reconnect.
type CloseReason struct {
	Code    int
	Message string
}

// The close reasons of Pusher protocol 7 that Herald uses. 4000–4099: do not
// reconnect; 4100–4199: reconnect after a pause; 4200–4299: reconnect at once.
var (
	CloseUnknownApp          = CloseReason{4001, "Application does not exist"}
	CloseAppDisabled         = CloseReason{4003, "Application is disabled"}
	CloseOverConnectionQuota = CloseReason{4004, "Application is over its connection quota"}
	CloseUnsupportedProtocol = CloseReason{4007, "Unsupported protocol version"}
	CloseUnauthorized        = CloseReason{4009, "Connection is unauthorized"}
	CloseTerminated          = CloseReason{4009, "Connection terminated by the server"}
	CloseAuthTimeout         = CloseReason{4009, "Connection not authorized in time: sign in or subscribe to a private channel"}
	CloseOverCapacity        = CloseReason{4100, "Client is too slow to receive its messages"}
	CloseShuttingDown        = CloseReason{4200, "Server is shutting down; please reconnect"}
	ClosePongTimeout         = CloseReason{4201, "Pong reply not received in time"}
)

// The close reasons of the WebSocket protocol itself (RFC 6455 §7.4.1),
// sent like the Pusher ones: as a pusher:error and as the close code.
var (
	CloseInvalidUTF8   = CloseReason{1007, "Invalid UTF-8 in a text message"}
	CloseInternalError = CloseReason{1011, "Internal server error while handling a message"}
)

// CloseGone is the reason of a connection whose client went away (its
// socket failed or closed): there is nobody left to tell, so a writer sends
// nothing and only closes. Its code, 0, is never sent.
var CloseGone = CloseReason{0, "client went away"}

// CloseCodes are the distinct codes of the reasons above, CloseGone's 0
// first: the transport counts the connections closed with each.
var CloseCodes = [...]int{
	CloseGone.Code, CloseUnknownApp.Code, CloseAppDisabled.Code, CloseOverConnectionQuota.Code,
	CloseUnsupportedProtocol.Code, CloseUnauthorized.Code, CloseOverCapacity.Code,
	CloseShuttingDown.Code, ClosePongTimeout.Code, CloseInvalidUTF8.Code, CloseInternalError.Code,
}
