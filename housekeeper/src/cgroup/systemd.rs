//! The systemd driver's way to remove an orphan's pod slice: over systemd's D-Bus API (zbus and the
//! `org.freedesktop.systemd1.Manager` interface), the way kubelet does it.
//!
//! kubelet's `podContainerManagerImpl.Destroy` kills the pod's processes first, then
//! `cgroupCommon.Destroy` asks libcontainer's systemd manager to destroy the slice: runc's
//! `stopUnit` (`StopUnit(<slice>, "replace")`, wait up to 30 s for the job, then
//! `ResetFailedUnit` so a failed unit does not linger), then the cgroupfs removal of whatever
//! systemd left behind (`UnifiedManager.Destroy` / `LegacyManager.Destroy`: systemd before 240
//! does not remove sub-cgroups, and on v1 kubelet creates some controller directories itself).
//! [`destroy_slice`] does the same, with two differences that an out-of-process agent needs:
//! - it connects to the bus before it kills anything, so a bus it cannot reach fails the action
//!   with nothing changed (rmdir behind systemd's back would leave systemd a unit whose cgroup is
//!   gone);
//! - it asks `GetUnit` first: `StopUnit` on a unit systemd does not have loaded succeeds on a stub
//!   and proves nothing, so only a slice systemd really does not know (`NoSuchUnit`) falls back to
//!   cgroupfs, and the action's evidence says so.
//!
//! [`reduce_slice_cpu`] is kubelet's `ReduceCPULimits` through the same manager: the unit property
//! first (`CPUWeight=1` on v2, `CPUShares=2` on v1, runtime-only, so systemd does not put the old
//! value back on its next reload), then the cgroup file.

use std::time::Duration;

use futures::StreamExt;
use zbus::zvariant::{OwnedObjectPath, Value};

use super::{CgroupError, CgroupLayout, CgroupVersion, DestroyReport, PodCgroup};

/// The system bus, where kubelet (through go-systemd) talks to systemd.
pub const SYSTEM_BUS: &str = "unix:path=/run/dbus/system_bus_socket";
/// runc's `stopUnit` wait for the stop job.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one D-Bus call may take (connecting included).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Manager {
    /// The unit's object path; `org.freedesktop.systemd1.NoSuchUnit` when it is not loaded.
    fn get_unit(&self, name: &str) -> zbus::Result<OwnedObjectPath>;
    /// Queues a stop job and returns its path.
    fn stop_unit(&self, name: &str, mode: &str) -> zbus::Result<OwnedObjectPath>;
    /// Forgets a failed unit's state.
    fn reset_failed_unit(&self, name: &str) -> zbus::Result<()>;
    /// Sets unit properties (`runtime`: not persisted).
    fn set_unit_properties(
        &self,
        name: &str,
        runtime: bool,
        properties: &[(&str, Value<'_>)],
    ) -> zbus::Result<()>;
    /// Asks systemd to send its signals (it sends none until some client subscribed).
    fn subscribe(&self) -> zbus::Result<()>;
    /// A job finished; `result` is `done`, `canceled`, `timeout`, `failed`, `dependency` or `skipped`.
    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: OwnedObjectPath,
        unit: String,
        result: String,
    ) -> zbus::Result<()>;
}

/// Why a systemd call failed.
#[derive(Debug, thiserror::Error)]
pub enum SystemdError {
    /// The bus could not be reached (or the session set up).
    #[error(
        "cannot reach systemd on D-Bus at {address}: {source} (with the systemd cgroup driver the \
         housekeeper needs the host's system bus socket; see --systemd-bus)"
    )]
    Connect {
        /// The bus address.
        address: String,
        /// What zbus said.
        #[source]
        source: Box<zbus::Error>,
    },
    /// A method call failed.
    #[error("systemd {call}({unit}): {source}")]
    Call {
        /// The Manager method.
        call: &'static str,
        /// The unit it was called for.
        unit: String,
        /// What systemd (or the bus) said.
        #[source]
        source: Box<zbus::Error>,
    },
    /// A call or the stop job did not finish in time (runc: "Timed out while waiting for systemd
    /// to remove ...").
    #[error("timed out after {after:?} waiting for systemd: {what}")]
    Timeout {
        /// What was being waited for.
        what: String,
        /// The limit.
        after: Duration,
    },
    /// The pod cgroup's name does not end in a slice unit of this pod.
    #[error("{0} is not a pod slice")]
    NotASlice(String),
    /// Called outside a tokio runtime (the client runs on the caller's runtime).
    #[error("no tokio runtime to run D-Bus calls on")]
    NoRuntime,
}

/// What stopping a slice did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopOutcome {
    /// systemd ran the stop job; `result` is its result (`done` normally).
    Stopped {
        /// The job's result.
        result: String,
    },
    /// systemd has no such unit loaded (`NoSuchUnit`).
    UnknownUnit,
}

/// A lazily connected client of systemd's Manager on one bus. The connection is kept and made again
/// after the bus went away (runc's `retryOnDisconnect`).
#[derive(Debug)]
pub struct SystemdClient {
    address: String,
    stop_timeout: Duration,
    conn: tokio::sync::Mutex<Option<ManagerProxy<'static>>>,
}

fn is_no_such_unit(e: &zbus::Error) -> bool {
    matches!(e, zbus::Error::MethodError(name, _, _) if name.as_str() == "org.freedesktop.systemd1.NoSuchUnit")
}

fn is_disconnect(e: &zbus::Error) -> bool {
    matches!(e, zbus::Error::InputOutput(_))
}

async fn timed<T>(
    what: impl FnOnce() -> String,
    after: Duration,
    fut: impl Future<Output = T>,
) -> Result<T, SystemdError> {
    tokio::time::timeout(after, fut)
        .await
        .map_err(|_| SystemdError::Timeout {
            what: what(),
            after,
        })
}

impl SystemdClient {
    /// A client for the bus at `address` (a D-Bus address such as [`SYSTEM_BUS`]). Nothing is
    /// connected until the first call.
    pub fn new(address: impl Into<String>) -> Self {
        Self {
            address: address.into(),
            stop_timeout: STOP_TIMEOUT,
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// Waits at most `timeout` for a stop job (default [`STOP_TIMEOUT`]).
    pub fn with_stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }

    /// The bus address.
    pub fn address(&self) -> &str {
        &self.address
    }

    async fn proxy(&self) -> Result<ManagerProxy<'static>, SystemdError> {
        let mut slot = self.conn.lock().await;
        if let Some(p) = slot.as_ref() {
            return Ok(p.clone());
        }
        let connect = |source| SystemdError::Connect {
            address: self.address.clone(),
            source: Box::new(source),
        };
        let proxy = timed(
            || format!("connecting to {}", self.address),
            CALL_TIMEOUT,
            async {
                let conn = zbus::connection::Builder::address(self.address.as_str())?
                    .method_timeout(CALL_TIMEOUT)
                    .build()
                    .await?;
                let proxy = ManagerProxy::new(&conn).await?;
                // go-systemd subscribes on every new connection; without it systemd may not
                // send JobRemoved.
                proxy.subscribe().await?;
                Ok::<_, zbus::Error>(proxy)
            },
        )
        .await?
        .map_err(connect)?;
        *slot = Some(proxy.clone());
        Ok(proxy)
    }

    async fn forget(&self) {
        *self.conn.lock().await = None;
    }

    /// Runs `op` on the Manager, once more on a new connection if the old one was closed.
    async fn call<T>(
        &self,
        call: &'static str,
        unit: &str,
        op: impl AsyncFn(&ManagerProxy<'static>) -> zbus::Result<T>,
    ) -> Result<T, SystemdError> {
        let mut retried = false;
        loop {
            let proxy = self.proxy().await?;
            match op(&proxy).await {
                Err(e) if is_disconnect(&e) && !retried => {
                    self.forget().await;
                    retried = true;
                }
                r => {
                    return r.map_err(|source| SystemdError::Call {
                        call,
                        unit: unit.to_owned(),
                        source: Box::new(source),
                    });
                }
            }
        }
    }

    /// Connects (if not yet connected) and subscribes: proves the bus and systemd answer.
    pub async fn connect(&self) -> Result<(), SystemdError> {
        self.proxy().await.map(drop)
    }

    /// Whether systemd has `unit` loaded (`GetUnit`).
    pub async fn knows(&self, unit: &str) -> Result<bool, SystemdError> {
        match self
            .call("GetUnit", unit, async |p| p.get_unit(unit).await)
            .await
        {
            Ok(_) => Ok(true),
            Err(SystemdError::Call { source, .. }) if is_no_such_unit(&source) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// runc's `stopUnit` for a unit systemd knows: `StopUnit(unit, "replace")`, wait for its job
    /// to be removed (at most the stop timeout), then `ResetFailedUnit` (its error ignored, as
    /// runc does). [`StopOutcome::UnknownUnit`] when systemd does not have the unit loaded.
    pub async fn stop_unit(&self, unit: &str) -> Result<StopOutcome, SystemdError> {
        if !self.knows(unit).await? {
            return Ok(StopOutcome::UnknownUnit);
        }
        let stop = async |p: &ManagerProxy<'static>| {
            // The match rule must be in place before the job can finish.
            let removed = p.receive_job_removed().await?;
            let job = p.stop_unit(unit, "replace").await?;
            Ok((removed, job))
        };
        let (mut removed, job) = match self.call("StopUnit", unit, stop).await {
            Err(SystemdError::Call { source, .. }) if is_no_such_unit(&source) => {
                return Ok(StopOutcome::UnknownUnit);
            }
            r => r?,
        };
        let result = timed(
            || format!("the stop job of {unit}"),
            self.stop_timeout,
            async {
                while let Some(signal) = removed.next().await {
                    if let Ok(args) = signal.args()
                        && args.job == job
                    {
                        return Some(args.result);
                    }
                }
                None
            },
        )
        .await?;
        let Some(result) = result else {
            self.forget().await;
            return Err(SystemdError::Call {
                call: "StopUnit",
                unit: unit.to_owned(),
                source: Box::new(zbus::Error::Failure(
                    "the bus closed before the stop job finished".into(),
                )),
            });
        };
        if result != "done" {
            tracing::warn!(unit, result = %result, "systemd stop job did not finish as done; continuing, as runc does");
        }
        if let Err(e) = self
            .call("ResetFailedUnit", unit, async |p| {
                p.reset_failed_unit(unit).await
            })
            .await
        {
            tracing::debug!(unit, error = %e, "ResetFailedUnit (ignored, as runc does)");
        }
        Ok(StopOutcome::Stopped { result })
    }

    /// Sets one `u64` property of a loaded unit for its runtime only; `Ok(false)` when systemd
    /// does not know the unit.
    pub async fn set_u64_property(
        &self,
        unit: &str,
        name: &str,
        value: u64,
    ) -> Result<bool, SystemdError> {
        if !self.knows(unit).await? {
            return Ok(false);
        }
        self.call("SetUnitProperties", unit, async |p| {
            p.set_unit_properties(unit, true, &[(name, Value::U64(value))])
                .await
        })
        .await?;
        Ok(true)
    }
}

/// The slice unit of a pod cgroup: the last component of its name, which must be a `.slice` that
/// names this pod (kubelet's `ToSystemd`: the unit name is the cgroup's base name).
pub fn slice_unit(cg: &PodCgroup) -> Result<String, SystemdError> {
    let base = cg.name.rsplit('/').next().unwrap_or_default();
    let parsed = super::parse_pod_cgroup_name(super::CgroupDriver::Systemd, base);
    if !base.ends_with(".slice") || parsed.as_deref() != Some(cg.uid.as_str()) {
        return Err(SystemdError::NotASlice(cg.name.clone()));
    }
    Ok(base.to_owned())
}

fn handle() -> Result<tokio::runtime::Handle, SystemdError> {
    tokio::runtime::Handle::try_current().map_err(|_| SystemdError::NoRuntime)
}

/// Destroys a pod slice the systemd driver's way; blocking (call it off the async threads, e.g. in
/// `spawn_blocking`, with a tokio runtime to run the D-Bus calls on).
///
/// 1. connect to systemd (fails with nothing changed if the bus does not answer);
/// 2. kill every process below the slice ([`super::kill_processes`]);
/// 3. `StopUnit` + wait + `ResetFailedUnit` ([`SystemdClient::stop_unit`]);
/// 4. remove through cgroupfs what is left ([`super::remove_dirs`]): everything when systemd does
///    not know the unit, else what systemd did not remove itself.
///
/// The report's notes say which path was taken.
pub fn destroy_slice(
    layout: &CgroupLayout,
    cg: &PodCgroup,
    client: &SystemdClient,
) -> Result<DestroyReport, CgroupError> {
    let unit = slice_unit(cg)?;
    let rt = handle()?;
    rt.block_on(client.connect())?;
    let killed = super::kill_processes(layout, cg)?;
    let outcome = rt.block_on(client.stop_unit(&unit))?;
    let removed = super::remove_dirs(layout, cg)?;
    let mut notes = Vec::new();
    match outcome {
        StopOutcome::Stopped { result } => {
            notes.push(format!(
                "systemd stopped {unit} (StopUnit job {result}, then ResetFailedUnit)"
            ));
            if !removed.is_empty() {
                notes.push(format!(
                    "{} cgroup directories systemd left behind removed through cgroupfs",
                    removed.len()
                ));
            }
        }
        StopOutcome::UnknownUnit => notes.push(format!(
            "systemd does not know {unit} (NoSuchUnit): removed through cgroupfs instead \
             ({} directories)",
            removed.len()
        )),
    }
    Ok(DestroyReport {
        killed,
        d_state: Vec::new(),
        removed,
        notes,
    })
}

/// kubelet's `ReduceCPULimits` with the systemd driver; blocking like [`destroy_slice`]. Sets the
/// slice's `CPUWeight=1` (v2) or `CPUShares=2` (v1, hybrid) through systemd when it knows the
/// unit, then writes the cgroup files ([`super::reduce_cpu`]). Without a cpu controller file it
/// still succeeds if systemd took the property.
pub fn reduce_slice_cpu(
    layout: &CgroupLayout,
    cg: &PodCgroup,
    client: &SystemdClient,
) -> Result<(), CgroupError> {
    let unit = slice_unit(cg)?;
    let (name, value) = match layout.version() {
        CgroupVersion::V2 => ("CPUWeight", 1),
        CgroupVersion::V1 | CgroupVersion::Hybrid => ("CPUShares", 2),
    };
    let set = handle()?.block_on(client.set_u64_property(&unit, name, value))?;
    match super::reduce_cpu(layout, cg) {
        Err(CgroupError::NoCpuController(_)) if set => Ok(()),
        r => r,
    }
}
