//! gRPC health probe (kubelet `pkg/probe/grpc`).

use std::net::IpAddr;
use std::time::Duration;

use crate::probe::{Attempt, Outcome};

/// One gRPC probe.
pub(crate) async fn probe(_host: IpAddr, _port: u16, _service: &str, _timeout: Duration, _ua: &str) -> Attempt {
    Ok(Outcome::Failure("not implemented yet".to_owned()))
}

/// A gRPC status as grpc-go prints it: `rpc error: code = Unavailable desc = ...`.
pub(crate) fn go_status(status: &tonic::Status) -> String {
    format!("rpc error: code = {} desc = {}", go_code(status.code()), status.message())
}

/// grpc-go's names of status codes.
pub(crate) fn go_code(code: tonic::Code) -> &'static str {
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
