package main

import "golang.org/x/sys/unix"

// datasync makes fd's written data durable. macOS has no fdatasync, and
// its fsync leaves the data in the drive's cache; F_FULLFSYNC flushes it.
func datasync(fd int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_FULLFSYNC, 0)
	return err
}
