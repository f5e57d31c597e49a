package ws

import (
	"encoding/json"
	"net/http"
)

// Error kinds of the transport's HTTP errors (the connect rate limit's 429
// and the HTTP fallback's refusals): the ones httpapi uses for the same
// refusals, so that a client sees one shape everywhere. They are restated
// here because ws does not import the generated API code.
const (
	kindNotFound         = "not_found"
	kindMethodNotAllowed = "method_not_allowed"
	kindBodyTooLarge     = "body_too_large"
	kindInvalidBody      = "invalid_body"
	kindUnreadableBody   = "unreadable_body"
	kindUnexpectedBody   = "unexpected_body"
	kindRateLimited      = "rate_limited"
)

// writeHTTPError answers with status and the error body of Herald's HTTP
// APIs: {"error":kind,"description":description}.
func writeHTTPError(w http.ResponseWriter, status int, kind, description string) {
	body, _ := json.Marshal(struct {
		Error       string `json:"error"`
		Description string `json:"description"`
	}{kind, description}) // two strings always encode
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
