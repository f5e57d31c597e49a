package httpapi

import (
	"errors"

	"github.com/gin-gonic/gin"

	"github.com/heraldrt/herald/storage"
)

// What the Push APIs store must be JSON both databases hold: a lone
// surrogate escape, a number beyond PostgreSQL's numeric or more than a few
// levels of nesting would otherwise fail in one database and not the other,
// with a 500. storage.CheckJSON is the one check; the APIs apply it to a
// request's whole body as it is read (refuseUnstorable), a trigger's
// push_if_offline to the payload it stores (preparePublish), and storage
// again to every JSON it writes (errorHooks answers that the same way).

// refuseUnstorable answers 400 and reports true when the request's path or
// query holds the NUL character, or its body (read already, nil when there
// is none) is JSON that storage.CheckJSON refuses. A body that is no JSON
// at all is left to the API's decoding, which says so in its own words.
func refuseUnstorable(c *gin.Context, body []byte) bool {
	if refuseNUL(c, body) {
		return true
	}
	if len(body) == 0 {
		return false
	}
	var je *storage.JSONError
	if err := storage.CheckJSON(body); errors.As(err, &je) && !je.Syntax {
		writeError(c, unstorableJSON(je))
		return true
	}
	return false
}

// unstorableJSON is the 400 answer to JSON storage.CheckJSON refused.
func unstorableJSON(je *storage.JSONError) *Error {
	return badRequest(KindInvalidRequest, "The JSON %s (at byte %d), which Herald does not store.", je.Reason, je.Offset)
}
