//! Test doubles shared by the crate's unit tests.

use std::net::IpAddr;

use futures::future::BoxFuture;

use crate::kill::Killer;
use crate::model::ContainerInfo;
use crate::runner::{ProbeRunner, ProbeVerdict};
use crate::spec::{ProbeSpec, ProbeType};

/// A probe runner whose probes never finish and a killer that accepts every stop: for tests of
/// the plumbing around workers (API, sources), where no verdict must ever arrive.
pub(crate) struct Never;

impl ProbeRunner for Never {
    fn run<'a>(
        &'a self,
        _: ProbeType,
        _: &'a ProbeSpec,
        _: IpAddr,
        _: &'a ContainerInfo,
    ) -> BoxFuture<'a, ProbeVerdict> {
        Box::pin(std::future::pending())
    }
}

impl Killer for Never {
    fn stop_container(&self, _: String, _: i64) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}
