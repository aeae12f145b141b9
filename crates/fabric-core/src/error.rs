//! The one error type of the library. Its [`ErrorKind`]s map one to one to
//! libfabric's `FI_E*` codes, so C-minded users find what they know
//! (`NoData` for `FI_ENODATA`, `Again` for `FI_EAGAIN`, ...), and every error
//! carries a sentence that says what went wrong in this case.
//!
//! Building an error with a `&'static str` detail does not allocate, so data
//! paths can return `Again` or `Trunc` without touching the heap.

use std::borrow::Cow;
use std::fmt;

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

macro_rules! kinds {
    ($( $(#[$m:meta])* $kind:ident = $code:literal, $c:literal, $text:literal; )*) => {
        /// The class of an error, one per `FI_E*` code of libfabric 1.17.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorKind {
            $( $(#[$m])* #[doc = concat!("`", $c, "` (", stringify!($code), "): ", $text, ".")] $kind, )*
        }

        impl ErrorKind {
            /// Every kind.
            pub const ALL: &'static [ErrorKind] = &[$(ErrorKind::$kind),*];

            /// The positive `FI_E*` value (errno values on Linux, 256 and up
            /// for the fabric-specific ones).
            pub const fn errno(self) -> i32 {
                match self { $(ErrorKind::$kind => $code,)* }
            }

            /// The C name (`"FI_ENODATA"`).
            pub const fn c_name(self) -> &'static str {
                match self { $(ErrorKind::$kind => $c,)* }
            }

            /// What `fi_strerror` says about this kind.
            pub const fn description(self) -> &'static str {
                match self { $(ErrorKind::$kind => $text,)* }
            }

            /// The kind for a positive (or negative) `FI_E*` / errno value.
            pub fn from_errno(code: i32) -> Option<ErrorKind> {
                match code.checked_abs()? { $($code => Some(ErrorKind::$kind),)* _ => None }
            }
        }
    };
}

kinds! {
    /// Not permitted.
    Perm = 1, "FI_EPERM", "Operation not permitted";
    NoEnt = 2, "FI_ENOENT", "No such file or directory";
    Intr = 4, "FI_EINTR", "Interrupted system call";
    Io = 5, "FI_EIO", "Input/output error";
    TooBig = 7, "FI_E2BIG", "Argument list too long";
    BadF = 9, "FI_EBADF", "Bad file descriptor";
    /// Try again; also `FI_EWOULDBLOCK`. Queues that are full say this.
    Again = 11, "FI_EAGAIN", "Resource temporarily unavailable";
    NoMem = 12, "FI_ENOMEM", "Cannot allocate memory";
    Access = 13, "FI_EACCES", "Permission denied";
    Fault = 14, "FI_EFAULT", "Bad address";
    Busy = 16, "FI_EBUSY", "Device or resource busy";
    NoDev = 19, "FI_ENODEV", "No such device";
    Inval = 22, "FI_EINVAL", "Invalid argument";
    MFile = 24, "FI_EMFILE", "Too many open files";
    NoSpc = 28, "FI_ENOSPC", "No space left on device";
    NoSys = 38, "FI_ENOSYS", "Function not implemented";
    NoMsg = 42, "FI_ENOMSG", "No message of desired type";
    /// Nothing matched: `getinfo` with no matching provider, a CQ with no
    /// completion.
    NoData = 61, "FI_ENODATA", "No data available";
    Overflow = 75, "FI_EOVERFLOW", "Value too large for defined data type";
    MsgSize = 90, "FI_EMSGSIZE", "Message too long";
    NoProtoOpt = 92, "FI_ENOPROTOOPT", "Protocol not available";
    OpNotSupp = 95, "FI_EOPNOTSUPP", "Operation not supported";
    AddrInUse = 98, "FI_EADDRINUSE", "Address already in use";
    AddrNotAvail = 99, "FI_EADDRNOTAVAIL", "Cannot assign requested address";
    NetDown = 100, "FI_ENETDOWN", "Network is down";
    NetUnreach = 101, "FI_ENETUNREACH", "Network is unreachable";
    ConnAborted = 103, "FI_ECONNABORTED", "Software caused connection abort";
    ConnReset = 104, "FI_ECONNRESET", "Connection reset by peer";
    NoBufs = 105, "FI_ENOBUFS", "No buffer space available";
    IsConn = 106, "FI_EISCONN", "Transport endpoint is already connected";
    NotConn = 107, "FI_ENOTCONN", "Transport endpoint is not connected";
    Shutdown = 108, "FI_ESHUTDOWN", "Cannot send after transport endpoint shutdown";
    TimedOut = 110, "FI_ETIMEDOUT", "Connection timed out";
    ConnRefused = 111, "FI_ECONNREFUSED", "Connection refused";
    HostDown = 112, "FI_EHOSTDOWN", "Host is down";
    HostUnreach = 113, "FI_EHOSTUNREACH", "No route to host";
    Already = 114, "FI_EALREADY", "Operation already in progress";
    InProgress = 115, "FI_EINPROGRESS", "Operation now in progress";
    RemoteIo = 121, "FI_EREMOTEIO", "Remote I/O error";
    Canceled = 125, "FI_ECANCELED", "Operation canceled";
    KeyRejected = 129, "FI_EKEYREJECTED", "Key was rejected by service";
    Other = 256, "FI_EOTHER", "Unspecified error";
    TooSmall = 257, "FI_ETOOSMALL", "Provided buffer is too small";
    OpBadState = 258, "FI_EOPBADSTATE", "Operation not permitted in current state";
    /// An error completion or event is waiting to be read with `readerr`.
    Avail = 259, "FI_EAVAIL", "Error available";
    BadFlags = 260, "FI_EBADFLAGS", "Flags not supported";
    NoEq = 261, "FI_ENOEQ", "Missing or unavailable event queue";
    Domain = 262, "FI_EDOMAIN", "Invalid resource domain";
    NoCq = 263, "FI_ENOCQ", "Missing or unavailable completion queue";
    Crc = 264, "FI_ECRC", "CRC error";
    Trunc = 265, "FI_ETRUNC", "Truncation error";
    NoKey = 266, "FI_ENOKEY", "Required key not available";
    NoAv = 267, "FI_ENOAV", "Missing or unavailable address vector";
    Overrun = 268, "FI_EOVERRUN", "Queue has been overrun";
    NoRx = 269, "FI_ENORX", "Receiver not ready, no receive buffers available";
}

impl ErrorKind {
    /// The negative code a libfabric call returns for this kind
    /// (`-FI_ENODATA` is -61).
    pub const fn code(self) -> i32 {
        -self.errno()
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// An error: a [`ErrorKind`] (the `FI_E*` code) and a sentence saying what
/// happened.
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct Error {
    kind: ErrorKind,
    detail: Cow<'static, str>,
}

impl Error {
    /// An error of `kind` described by `detail`.
    pub fn new(kind: ErrorKind, detail: impl Into<Cow<'static, str>>) -> Self {
        Error {
            kind,
            detail: detail.into(),
        }
    }

    /// An error of `kind` whose message is the kind's own description; does
    /// not allocate.
    #[inline]
    pub const fn from_kind(kind: ErrorKind) -> Self {
        Error {
            kind,
            detail: Cow::Borrowed(kind.description()),
        }
    }

    /// The kind.
    pub const fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The negative `FI_E*` code libfabric would return (`-61` for NoData).
    pub const fn code(&self) -> i32 {
        self.kind.code()
    }

    /// The sentence describing this error.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// `NoData` with a message.
    pub fn no_data(detail: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::NoData, detail)
    }

    /// `Inval` with a message.
    pub fn inval(detail: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::Inval, detail)
    }

    /// `BadFlags` with a message.
    pub fn bad_flags(detail: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::BadFlags, detail)
    }

    /// `NoSys` with a message.
    pub fn no_sys(detail: impl Into<Cow<'static, str>>) -> Self {
        Error::new(ErrorKind::NoSys, detail)
    }

    /// `Again` (a queue is full or empty: retry after progress); does not
    /// allocate.
    #[inline]
    pub const fn again() -> Self {
        Error::from_kind(ErrorKind::Again)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}({}): {}",
            self.kind.c_name(),
            self.code(),
            self.detail
        )
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Self {
        Error::from_kind(kind)
    }
}

impl From<std::io::Error> for Error {
    /// Keeps the errno when it has an `FI_E*` equivalent, else `FI_EOTHER`.
    fn from(e: std::io::Error) -> Self {
        let kind = e
            .raw_os_error()
            .and_then(ErrorKind::from_errno)
            .unwrap_or(match e.kind() {
                std::io::ErrorKind::WouldBlock => ErrorKind::Again,
                std::io::ErrorKind::InvalidInput => ErrorKind::Inval,
                std::io::ErrorKind::TimedOut => ErrorKind::TimedOut,
                std::io::ErrorKind::ConnectionRefused => ErrorKind::ConnRefused,
                std::io::ErrorKind::ConnectionReset => ErrorKind::ConnReset,
                std::io::ErrorKind::NotFound => ErrorKind::NoEnt,
                std::io::ErrorKind::PermissionDenied => ErrorKind::Access,
                _ => ErrorKind::Other,
            });
        Error::new(kind, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_libfabric_values() {
        assert_eq!(Error::from_kind(ErrorKind::NoData).code(), -61);
        assert_eq!(ErrorKind::NoSys.code(), -38);
        assert_eq!(ErrorKind::Again.code(), -11);
        assert_eq!(ErrorKind::BadFlags.code(), -260);
        assert_eq!(ErrorKind::NoRx.code(), -269);
        for k in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_errno(k.code()), Some(*k));
        }
    }

    #[test]
    fn message_is_the_detail() {
        let e = Error::no_data("no provider matches these hints: x");
        assert_eq!(e.to_string(), "no provider matches these hints: x");
        assert_eq!(
            format!("{e:?}"),
            "FI_ENODATA(-61): no provider matches these hints: x"
        );
    }

    #[test]
    fn io_errors_keep_errno() {
        let e: Error = std::io::Error::from_raw_os_error(111).into();
        assert_eq!(e.kind(), ErrorKind::ConnRefused);
    }
}
