package hub

import (
	"io"
	"strconv"

	"github.com/heraldrt/herald/server/signing"
	"github.com/heraldrt/herald/storage"
)

// readMessage reads one message of at most max bytes. A larger one is read
// to its end and discarded, so the connection stays usable; tooBig reports it.
func readMessage(r io.Reader, max int) (msg []byte, tooBig bool, err error) {
	msg, err = io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, false, err
	}
	if len(msg) <= max {
		return msg, false, nil
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, false, err
	}
	return nil, true, nil
}

// verifyChannelAuth checks a subscription's auth string against the app.
func verifyChannelAuth(auth string, app *storage.App, socketID, channel, channelData string) bool {
	return signing.VerifyChannelAuth(auth, app.Key, app.Secret, socketID, channel, channelData)
}

func itoa(n int) string { return strconv.Itoa(n) }
