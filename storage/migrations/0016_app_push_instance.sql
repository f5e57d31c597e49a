-- The Push instance an app is linked to (App.PushInstance): a trigger to a
-- user's channel with push_if_offline publishes through it when the user is
-- offline. NULL is no link, the default, so existing apps have none;
-- deleting the instance unlinks its apps. 0014 is left to another change.
-- Conventions as in 0001_init.sql.
ALTER TABLE apps ADD COLUMN push_instance TEXT REFERENCES instances (id) ON DELETE SET NULL;
