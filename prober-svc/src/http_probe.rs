//! HTTP(S) GET probe (kubelet `pkg/probe/http`).

use std::time::Duration;

use crate::probe::{Attempt, ProbeTarget};
use crate::spec::HttpGetSpec;

/// HTTP prober with its per-process state (User-Agent, TLS config) built once.
#[derive(Debug)]
pub(crate) struct HttpProber {
    user_agent: String,
}

impl HttpProber {
    pub(crate) fn new(user_agent: &str) -> Self {
        Self { user_agent: user_agent.to_owned() }
    }

    pub(crate) async fn probe(&self, _get: &HttpGetSpec, _timeout: Duration, _target: &ProbeTarget<'_>) -> Attempt {
        Err(format!("{}: not implemented yet", self.user_agent))
    }
}
