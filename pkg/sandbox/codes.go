package sandbox

import (
	"errors"
	"io/fs"
	"syscall"
)

// The file tools' error codes (docs/sandbox.md, "File tool error codes"); glob and grep use them
// for their paths too.
const (
	CodeNotObserved    = "FS_NOT_OBSERVED"
	CodeNotFound       = "FS_NOT_FOUND"
	CodeStaleVersion   = "FS_STALE_VERSION"
	CodeAmbiguousEdit  = "FS_AMBIGUOUS_EDIT"
	CodeEditNotFound   = "FS_EDIT_NOT_FOUND"
	CodeNotText        = "FS_NOT_TEXT"
	CodeTooLarge       = "FS_TOO_LARGE"
	CodeSandboxDenied  = "FS_SANDBOX_DENIED"
	CodePermission     = "FS_PERMISSION_DENIED"
	CodeNotRegularFile = "FS_NOT_REGULAR_FILE"
	CodeNotDirectory   = "FS_NOT_DIRECTORY"
	CodeIOError        = "FS_IO_ERROR"
	CodeAborted        = "FS_ABORTED"
	// CodeQuotaExceeded is a write refused by the tenant bound on workspace bytes
	// (WorkspacesConfig.TenantQuotaBytes, ErrTenantQuota).
	CodeQuotaExceeded = "FS_QUOTA_EXCEEDED"
)

// Code returns the FS_* code of an error of a workspace operation: ErrOutside and os.Root's
// refusal of an escaping path are FS_SANDBOX_DENIED, ErrQuota is FS_TOO_LARGE, ErrTenantQuota is
// FS_QUOTA_EXCEEDED, and the os errors map to not found, permission denied and not a directory;
// anything else is FS_IO_ERROR.
func Code(err error) string {
	switch {
	case IsOutside(err):
		return CodeSandboxDenied
	case errors.Is(err, ErrQuota):
		return CodeTooLarge
	case errors.Is(err, ErrTenantQuota):
		return CodeQuotaExceeded
	case errors.Is(err, fs.ErrNotExist):
		return CodeNotFound
	case errors.Is(err, fs.ErrPermission):
		return CodePermission
	case errors.Is(err, syscall.ENOTDIR):
		return CodeNotDirectory
	}
	return CodeIOError
}

// IsOutside reports whether err is ErrOutside or os.Root's refusal of a path that escapes it
// (a `..` or a symbolic link out of the workspace). os does not export that error; its message
// is part of its documented behaviour ("path escapes from parent").
func IsOutside(err error) bool {
	if errors.Is(err, ErrOutside) {
		return true
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "path escapes from parent" {
			return true
		}
	}
	return false
}
