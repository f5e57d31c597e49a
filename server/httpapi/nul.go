package httpapi

import (
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/heraldrt/herald/storage"
)

// The NUL character is refused in what the Push and admin APIs store: their
// paths, queries and JSON bodies. PostgreSQL's text cannot hold it, raw or
// as JSON's \u0000 escape (it answers SQLSTATE 22021 or 22P05), and SQLite
// would store it: refusing it before storage gives one answer, 400, on both
// databases. No id, name, token or payload of these APIs has a use for it.
// The Channels API relays event data without storing it, and keeps it.

// nulRefused is the answer to a request holding a NUL character.
var nulRefused = badRequest(KindInvalidRequest, `The request holds the NUL character (\u0000), which no field accepts.`)

// refuseNUL answers 400 and reports true when the request's path, query or
// body (read already, nil when there is none) holds a NUL character.
func refuseNUL(c *gin.Context, body []byte) bool {
	u := c.Request.URL // Path is decoded; the query is not yet
	if strings.IndexByte(u.Path, 0) >= 0 || strings.Contains(u.RawQuery, "%00") || storage.JSONHoldsNUL(body) {
		writeError(c, nulRefused)
		return true
	}
	return false
}
