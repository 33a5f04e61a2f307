//! Go's wording, so that every message a probe produces reads as kubelet's own: durations as
//! `time.Duration.String()`, gRPC statuses as grpc-go's `status.Error`, OS errors as
//! `syscall.Errno.Error()`. Users grep for kubelet's messages; these keep them findable.

use std::io;
use std::time::Duration;

/// Go's `time.Duration.String()` for whole and fractional seconds ("1s", "1m30s", "1h0m0s"), as
/// kubelet's messages print timeouts.
pub fn go_duration(d: Duration) -> String {
    let total = d.as_secs();
    let frac = d.subsec_millis();
    let (h, m, s) = (total / 3600, (total / 60) % 60, total % 60);
    let secs = if frac == 0 {
        format!("{s}s")
    } else {
        format!("{s}.{}s", format!("{frac:03}").trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, _) => format!("{m}m{secs}"),
        _ => format!("{h}h{m}m{secs}"),
    }
}

/// A gRPC status as grpc-go prints it: `rpc error: code = Unavailable desc = ...`.
pub fn go_status(code: tonic::Code, message: &str) -> String {
    format!("rpc error: code = {} desc = {message}", go_code(code))
}

/// grpc-go's names of status codes.
pub fn go_code(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Canceled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

/// Go prints a `syscall.Errno` as libc's `strerror` in lower case ("connection refused"); Rust's
/// `io::Error` adds a capital and "(os error N)". The errno values are Linux's.
pub fn go_errno(e: &io::Error) -> String {
    let text = match e.raw_os_error() {
        Some(libc_code) => match libc_code {
            111 => "connection refused",
            113 => "no route to host",
            101 => "network is unreachable",
            104 => "connection reset by peer",
            110 => "connection timed out",
            99 => "cannot assign requested address",
            24 => "too many open files",
            _ => "",
        }
        .to_owned(),
        None => String::new(),
    };
    if !text.is_empty() {
        return text;
    }
    let s = e.to_string();
    let s = s.split(" (os error").next().unwrap_or(&s).to_owned();
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => s,
    }
}
