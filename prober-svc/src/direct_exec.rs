//! [`ExecRunner`] that starts the probe command in the container directly, exactly as
//! `runc exec` would, instead of through CRI `ExecSync` (containerd → shim → `runc exec` → `runc
//! init`: two Go process starts and several runtime round trips per probe).
//!
//! Per container, once: CRI verbose `ContainerStatus` gives the init PID and the OCI runtime
//! spec; [`prepare`] turns them (and the runtime shim's inherited limits) into a [`plan::Plan`]
//! or a [`prepare::Refusal`]. Per probe, [`spawn`] runs the plan through the helper ([`init`],
//! this binary re-executed) under the probe's timeout. The choice and its reason are logged once
//! per container and shown in `Status` ([`ExecRunner::choice`]).
//!
//! Modes ([`ExecMode`]): `cri` never enters containers; `direct` refuses to fall back (a refused
//! container's exec probes error with the reason, so the probe is discarded, never a kill);
//! `auto` falls back to CRI for refused containers.

mod helper;
pub mod init;
pub mod plan;
pub mod prepare;
pub mod seccomp;
mod spawn;
mod standby;
mod sys;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use podward_api::cri::runtime_service_client::RuntimeServiceClient;
use podward_api::cri::{ContainerState, ContainerStatusRequest};
use podward_api::limits::CRI_MESSAGE_BYTES;
use tokio::sync::Semaphore;
use tonic::transport::Channel;

use self::plan::Plan;
use self::prepare::{Host, Refusal};
use self::standby::Standby;
use crate::handler::exec::cri::CriExec;
use crate::handler::exec::runner::{ExecChoice, ExecError, ExecOutput, ExecRunner, ExecVia};

/// How exec probes run.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum ExecMode {
    /// Always CRI `ExecSync` (the default: it needs no privilege).
    #[default]
    Cri,
    /// Always direct; a container direct exec refuses gets errored probes with the reason.
    Direct,
    /// Direct where the container allows it, CRI otherwise.
    Auto,
}

/// Cached decisions beyond this many containers are dropped (and made again on demand).
const MAX_CACHED: usize = 8192;

/// Most helpers alive at once for one container (kubelet runs one probe of each of the three
/// kinds at a time; a helper outlives its probe by the end of the probe at most): a container
/// whose probes never finish cannot make the prober start helpers without end.
const MAX_IN_FLIGHT: usize = 4;

/// The per-container decision.
#[derive(Debug)]
enum Decision {
    Direct(Box<Plan>),
    Refused(Refusal),
}

/// Direct exec, with CRI as the fallback.
pub struct DirectExec {
    mode: ExecMode,
    cri: CriExec,
    client: RuntimeServiceClient<Channel>,
    helpers: Standby,
    host: Host,
    decisions: Mutex<HashMap<String, Arc<Decision>>>,
    /// Per container, the places for its helpers in flight ([`MAX_IN_FLIGHT`]).
    in_flight: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl DirectExec {
    /// A runner in `mode`, talking CRI on `channel` (containerd), starting `helper` (the prober's
    /// own binary) for direct execs, one helper ahead of the probe that takes it.
    pub fn new(mode: ExecMode, channel: Channel, helper: PathBuf) -> Self {
        Self::with_standby(mode, channel, helper, true)
    }

    /// [`DirectExec::new`], with `standby` false starting every probe's helper when the probe
    /// runs (no helper waits between probes; each probe pays the helper's start-up).
    pub fn with_standby(mode: ExecMode, channel: Channel, helper: PathBuf, standby: bool) -> Self {
        let client = RuntimeServiceClient::new(channel.clone())
            .max_decoding_message_size(CRI_MESSAGE_BYTES)
            .max_encoding_message_size(CRI_MESSAGE_BYTES);
        Self {
            mode,
            cri: CriExec::new(channel),
            client,
            helpers: Standby::new(helper, standby),
            host: Host::default(),
            decisions: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// The decision for `container_id`, made once (a CRI call) and cached.
    async fn decision(&self, container_id: &str) -> Result<Arc<Decision>, ExecError> {
        if let Some(d) = self.decisions.lock().get(container_id) {
            return Ok(d.clone());
        }
        let resp = self
            .client
            .clone()
            .container_status(ContainerStatusRequest {
                container_id: container_id.to_owned(),
                verbose: true,
            })
            .await
            .map_err(|s| ExecError::Runtime {
                code: s.code(),
                message: s.message().to_owned(),
            })?
            .into_inner();
        // Bound to a running container only: the PID of a created or exited one names no
        // process of it (and is not cached, so the probe after it starts asks again).
        let running = resp
            .status
            .as_ref()
            .is_some_and(|s| s.state == ContainerState::ContainerRunning as i32);
        if !running {
            return Err(ExecError::Runtime {
                code: tonic::Code::FailedPrecondition,
                message: "direct exec: the container is not running".to_owned(),
            });
        }
        let decision = match resp.info.get("info") {
            Some(info) => match prepare::prepare(container_id, info, &self.host) {
                Ok(plan) => Decision::Direct(Box::new(plan)),
                Err(r) => Decision::Refused(r),
            },
            None => Decision::Refused(Refusal::Missing("verbose info")),
        };
        match &decision {
            Decision::Direct(_) => {
                tracing::info!(container_id, "exec probes run directly in the container")
            }
            Decision::Refused(r) if self.mode == ExecMode::Auto => {
                tracing::info!(container_id, reason = %r, "exec probes fall back to CRI ExecSync")
            }
            Decision::Refused(r) => {
                tracing::warn!(container_id, reason = %r, "direct exec refused: exec probes will error")
            }
        }
        let d = Arc::new(decision);
        let mut map = self.decisions.lock();
        if map.len() >= MAX_CACHED {
            map.clear();
        }
        map.insert(container_id.to_owned(), d.clone());
        Ok(d)
    }

    fn forget(&self, container_id: &str) {
        self.decisions.lock().remove(container_id);
        self.in_flight.lock().remove(container_id);
    }

    /// A place for one more helper in `container_id`, if it has fewer than [`MAX_IN_FLIGHT`].
    fn place(&self, container_id: &str) -> Result<spawn::InFlight, ExecError> {
        let sem = {
            let mut map = self.in_flight.lock();
            if map.len() >= MAX_CACHED && !map.contains_key(container_id) {
                // Places already taken stay valid (they hold their semaphore); only entries of
                // containers with nothing in flight are lost, and made again on demand.
                map.retain(|_, s| s.available_permits() < MAX_IN_FLIGHT);
            }
            map.entry(container_id.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(MAX_IN_FLIGHT)))
                .clone()
        };
        sem.try_acquire_owned().map_err(|_| ExecError::Runtime {
            code: tonic::Code::ResourceExhausted,
            message: format!(
                "direct exec: {MAX_IN_FLIGHT} exec helpers of this container are still running"
            ),
        })
    }

    /// Replaces `container_id`'s decision by a refusal made at probe time.
    fn refuse(&self, container_id: &str, reason: String) -> Refusal {
        if self.mode == ExecMode::Auto {
            tracing::warn!(container_id, %reason, "direct exec refused: exec probes fall back to CRI ExecSync");
        } else {
            tracing::warn!(container_id, %reason, "direct exec refused: exec probes will error");
        }
        let refusal = Refusal::Changed(reason);
        self.decisions.lock().insert(
            container_id.to_owned(),
            Arc::new(Decision::Refused(refusal.clone())),
        );
        refusal
    }

    async fn run(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecOutput, ExecError> {
        if self.mode == ExecMode::Cri {
            return self.cri.exec_sync(container_id, cmd, timeout).await;
        }
        let decision = self.decision(container_id).await?;
        let refusal = match &*decision {
            Decision::Direct(plan) => {
                let mut plan = plan.clone();
                plan.argv = cmd.clone();
                let place = self.place(container_id)?;
                match spawn::run(&self.helpers, &plan, timeout, place).await {
                    Ok(out) => return Ok(out),
                    Err(spawn::Failure::Refused(reason)) => self.refuse(container_id, reason),
                    Err(spawn::Failure::Exec(e)) => {
                        if let ExecError::Runtime { message, .. } = &e
                            && message.contains("init process is gone")
                        {
                            // The container stopped: the next instance has another ID; free
                            // the entry.
                            self.forget(container_id);
                        }
                        return Err(e);
                    }
                }
            }
            Decision::Refused(r) => r.clone(),
        };
        if self.mode == ExecMode::Auto {
            self.cri.exec_sync(container_id, cmd, timeout).await
        } else {
            Err(ExecError::Runtime {
                code: tonic::Code::FailedPrecondition,
                message: format!("direct exec refused: {refusal}"),
            })
        }
    }
}

impl ExecRunner for DirectExec {
    fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<ExecOutput, ExecError>> {
        let container_id = container_id.to_owned();
        Box::pin(async move { self.run(&container_id, cmd, timeout).await })
    }

    fn choice(&self, container_id: &str) -> Option<ExecChoice> {
        if self.mode == ExecMode::Cri {
            return Some(ExecChoice {
                runner: ExecVia::Cri,
                reason: "--exec-mode=cri".to_owned(),
            });
        }
        let d = self.decisions.lock().get(container_id).cloned()?;
        Some(match &*d {
            Decision::Direct(_) => ExecChoice {
                runner: ExecVia::Direct,
                reason: String::new(),
            },
            Decision::Refused(r) => ExecChoice {
                runner: if self.mode == ExecMode::Auto {
                    ExecVia::Cri
                } else {
                    ExecVia::Refused
                },
                reason: r.to_string(),
            },
        })
    }
}
