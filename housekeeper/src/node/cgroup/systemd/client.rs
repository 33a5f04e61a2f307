//! A small client of systemd's Manager over D-Bus (zbus): just the calls kubelet's path needs
//! (`GetUnit`, `StopUnit` + `JobRemoved`, `ResetFailedUnit`, `SetUnitProperties`, `Subscribe`),
//! with runc's `stopUnit` semantics and its reconnect-once-on-disconnect.

use std::time::Duration;

use futures::StreamExt;
use zbus::zvariant::{OwnedObjectPath, Value};

use crate::node::cgroup::systemd_error::SystemdError;

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
    /// A job finished; `result` is `done`, `canceled`, `timeout`, `failed`, `dependency` or
    /// `skipped`.
    #[zbus(signal)]
    fn job_removed(
        &self,
        id: u32,
        job: OwnedObjectPath,
        unit: String,
        result: String,
    ) -> zbus::Result<()>;
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
