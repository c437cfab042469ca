// Package fulldisk gives a test a directory on a full filesystem: a small tmpfs mounted over it and
// filled up, for the "no space left on device" paths. Mounting needs root (CAP_SYS_ADMIN); the tests
// that use it run as root, as CI does, and fail rather than skip without it. Only tests import it: the
// agent binary does not link it (nor the testing package it uses).
package fulldisk
