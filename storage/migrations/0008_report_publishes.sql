-- Reports belong to their publish. RecordReportEvent now counts a report only
-- for a publish of the instance that targeted the device; reports stored
-- before that for publishes that do not exist (anyone could send any publish
-- id) are dropped with their counts. Reports of real publishes are kept as
-- they are: whether their devices were targets cannot be told any more.
-- Conventions as in 0001_init.sql.
DELETE FROM report_events
WHERE NOT EXISTS (SELECT 1 FROM publishes p WHERE p.id = report_events.publish_id AND p.instance_id = report_events.instance_id);

DELETE FROM publish_report_counts
WHERE NOT EXISTS (SELECT 1 FROM publishes p WHERE p.id = publish_report_counts.publish_id AND p.instance_id = publish_report_counts.instance_id);

-- A publish's reports go with it, so report rows stay bounded by the
-- publishes kept (at most two per targeted device). Publishes are deleted
-- today only with their instance (which removes the reports too); this
-- keeps the bound if publishes are ever pruned on their own. The deletes use
-- report_events_publish and the counts' primary key.
CREATE TRIGGER publishes_delete_reports AFTER DELETE ON publishes
BEGIN
    DELETE FROM report_events WHERE instance_id = OLD.instance_id AND publish_id = OLD.id;
    DELETE FROM publish_report_counts WHERE instance_id = OLD.instance_id AND publish_id = OLD.id;
END;
