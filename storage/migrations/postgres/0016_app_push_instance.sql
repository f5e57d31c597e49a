-- As ../0016_app_push_instance.sql: the Push instance an app is linked to.
ALTER TABLE apps ADD COLUMN push_instance TEXT COLLATE "C" REFERENCES instances (id) ON DELETE SET NULL;
