package httpapi

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/gin-gonic/gin"
)

// specChecker validates every response the server writes against the
// embedded OpenAPI document, so the spec, the server and the generated client
// are checked against each other by every contract test.
type specChecker struct {
	t      *testing.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool // "operationId status" pairs answered
}

func newSpecChecker(t *testing.T, load func() (*openapi3.T, error)) *specChecker {
	t.Helper()
	doc, err := load()
	if err != nil {
		t.Fatalf("loading embedded spec: %v", err)
	}
	doc.Servers = nil // match any host
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatalf("spec router: %v", err)
	}
	return &specChecker{t: t, router: router, seen: map[string]bool{}}
}

type capture struct {
	gin.ResponseWriter
	body bytes.Buffer
}

func (c *capture) Write(b []byte) (int, error) {
	c.body.Write(b)
	return c.ResponseWriter.Write(b)
}

// middleware records the response and validates it once the handler is done.
// Requests outside the spec (NoRoute, /healthz) only need the error body.
func (s *specChecker) middleware(c *gin.Context) {
	w := &capture{ResponseWriter: c.Writer}
	c.Writer = w
	c.Next()
	if c.FullPath() == "" || c.FullPath() == "/healthz" {
		return // not an operation of the spec
	}
	route, pathParams, err := s.router.FindRoute(c.Request)
	if err != nil {
		s.t.Errorf("%s %s is served but the spec has no such operation: %v", c.Request.Method, c.Request.URL.Path, err)
		return
	}
	status := w.Status()
	s.mu.Lock()
	s.seen[strings.ToLower(route.Operation.OperationID)+" "+strconv.Itoa(status)] = true
	s.mu.Unlock()
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request:    c.Request,
			PathParams: pathParams,
			Route:      route,
			Options:    &openapi3filter.Options{ExcludeRequestBody: true},
		},
		Status:  status,
		Header:  w.Header(),
		Body:    io.NopCloser(bytes.NewReader(w.body.Bytes())),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		s.t.Errorf("%s %s answered %d %s, which the spec does not allow: %v", c.Request.Method, c.Request.URL.Path, status, w.body.String(), err)
	}
}
