package httpapi

import (
	"context"
	"strings"

	"github.com/gin-gonic/gin"
	"go.uber.org/zap"

	"github.com/heraldrt/herald/gen/reporting"
	"github.com/heraldrt/herald/server/beamsauth"
	"github.com/heraldrt/herald/server/internal/text"
	"github.com/heraldrt/herald/storage"
)

// Limits of the Reporting API (spec/reporting.yaml states the same).
const (
	// MaxReportBodyBytes caps a report body; a report is a few hundred bytes.
	MaxReportBodyBytes = 64 * 1024
	maxReportIDLength  = 128
)

// ReportingAPI implements the Push Reporting API over storage.
type ReportingAPI struct {
	db        *storage.DB
	instances InstanceLookup
	log       *zap.Logger
	anon      *AnonLimiter // requests per client address (ReportingOptions.LimitPerClient); nil: no limit
}

var _ reporting.StrictServerInterface = (*ReportingAPI)(nil)

// ReportingOptions are the optional parts of the Reporting API; the zero
// value limits no client.
type ReportingOptions struct {
	// LimitPerClient takes each request from the limiter's budget for its
	// client address; nil: no limit.
	LimitPerClient *AnonLimiter
}

// NewReportingAPI returns the Reporting API handler, with the optional
// parts opts gives.
func NewReportingAPI(db *storage.DB, instances InstanceLookup, log *zap.Logger, opts ReportingOptions) *ReportingAPI {
	return &ReportingAPI{db: db, instances: instances, log: log.Named("reporting"), anon: opts.LimitPerClient}
}

// mount binds the API's operations on g (Mount says what comes before).
func (api *ReportingAPI) mount(g gin.IRouter) {
	onError := errorHooks(api.log)
	strict := reporting.NewStrictHandlerWithOptions(api, nil, reporting.StrictGinServerOptions{
		RequestErrorHandlerFunc:  requestErrorHook,
		HandlerErrorFunc:         onError,
		ResponseErrorHandlerFunc: onError,
	})
	reporting.RegisterHandlersWithOptions(g, strict, reporting.GinServerOptions{ErrorHandler: paramErrorHook})
}

// ReportEvent implements POST /reporting_api/v2/instances/{instance_id}/events.
// A report counts only for a publish of the instance that targeted the
// device, once per device and kind (storage.RecordReportEvent). One that does
// not count is still answered 200: the SDKs ignore the answer, and a stale or
// repeated report is not the device's mistake to be told about.
func (api *ReportingAPI) ReportEvent(ctx context.Context, req reporting.ReportEventRequestObject) (reporting.ReportEventResponseObject, error) {
	in, ctx := requestScope(ctx)
	b := req.Body
	kind := storage.ReportKind(strings.ToLower(b.Event))
	switch {
	case b.Event == "":
		return nil, badRequest(KindMissingEvent, "event is required: delivery or open.")
	case kind != storage.ReportDelivery && kind != storage.ReportOpen:
		return nil, badRequest(KindInvalidEvent, "event %q is not delivery or open.", text.Truncate(b.Event, 64))
	case b.PublishID == "":
		return nil, badRequest(KindMissingPublishID, "publishId is required.")
	case len(b.PublishID) > maxReportIDLength:
		return nil, badRequest(KindInvalidPublishID, "publishId is longer than %d bytes.", maxReportIDLength)
	case b.DeviceID == "":
		return nil, badRequest(KindMissingDeviceID, "deviceId is required.")
	case len(b.DeviceID) > maxReportIDLength:
		return nil, badRequest(KindInvalidDeviceID, "deviceId is longer than %d bytes.", maxReportIDLength)
	case b.TimestampSecs == 0:
		return nil, badRequest(KindMissingTimestamp, "timestampSecs is required: seconds since the Unix epoch.")
	case b.TimestampSecs < 0:
		return nil, badRequest(KindInvalidTimestamp, "timestampSecs must be positive seconds since the Unix epoch.")
	}
	ev := storage.ReportEvent{
		InstanceID:    in.ID,
		PublishID:     b.PublishID,
		DeviceID:      b.DeviceID,
		Kind:          kind,
		TimestampSecs: b.TimestampSecs,
	}
	if b.UserID != nil {
		if len(*b.UserID) > beamsauth.MaxUserIDLength*4 || len([]rune(*b.UserID)) > beamsauth.MaxUserIDLength {
			return nil, badRequest(KindInvalidUserID, "userId is longer than %d characters.", beamsauth.MaxUserIDLength)
		}
		ev.UserID = *b.UserID
	}
	// The flags describe a delivery; on an open they mean nothing and are dropped.
	if kind == storage.ReportDelivery {
		ev.AppInBackground, ev.HasDisplayableContent, ev.HasData = b.AppInBackground, b.HasDisplayableContent, b.HasData
	}
	counted, err := api.db.RecordReportEvent(ctx, ev)
	if err != nil {
		return nil, err
	}
	if !counted {
		api.log.Debug("report not counted: unknown publish, device not targeted, or reported already",
			zap.String("instance", in.ID), zap.String("publish", ev.PublishID), zap.String("device", ev.DeviceID),
			zap.String("event", string(kind)))
	}
	return reporting.ReportEvent200JSONResponse{}, nil
}
