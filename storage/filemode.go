package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// The database holds app secrets, instance keys and VAPID private keys, so
// its files are the owner's alone. SQLite gives the -wal and -shm files the
// mode of the database file, so creating the database 0600 covers them.
const privateMode fs.FileMode = 0o600

// ErrUnsafePermissions means the database file, or its -wal or -shm file,
// can be written by users other than its owner: anyone of them could change
// secrets or apps, so Herald refuses to open it.
var ErrUnsafePermissions = errors.New("storage: database file writable by others")

// preparePrivateFiles creates the database file at path 0600 when it does not
// exist yet, refuses one that its group or others may write, and takes away
// the group's and others' read access from one that has it (a file made by an
// earlier version, under umask 022). The same goes for the -wal and -shm files
// when they exist.
func preparePrivateFiles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, privateMode)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return err
	}
	for _, name := range []string{path, path + "-wal", path + "-shm"} {
		info, err := os.Stat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		mode := info.Mode().Perm()
		if mode&0o022 != 0 {
			return fmt.Errorf("%w: %s has mode %04o; make it private with chmod 600", ErrUnsafePermissions, name, mode)
		}
		if mode&0o044 != 0 {
			if err := os.Chmod(name, mode&^0o077); err != nil {
				return fmt.Errorf("making %s private: %w", name, err)
			}
		}
	}
	return nil
}
