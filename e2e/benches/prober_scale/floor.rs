//! The floor: the same connections as the probes (same targets, rate and socket options: a
//! fresh TCP connection with `SO_LINGER 1 s` and `TCP_NODELAY`, an HTTP/1.1 GET read to EOF for
//! readiness, connect-and-close for liveness) from bare tokio tasks with no prober logic. The
//! prober's CPU divided by this is its own overhead; what the floor costs is the kernel's and
//! the runtime's, which no prober built on fresh connections (kubelet's rule) can avoid.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::time::{Instant, MissedTickBehavior};

use super::servers::Target;

/// Probe-like connections done and failed.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) done: AtomicU64,
    pub(crate) failed: AtomicU64,
}

/// Starts `containers` × (TCP + HTTP) loops at `period`, as `--mix lr` pairs them up.
pub(crate) fn start(containers: usize, period: Duration, targets: &[Target]) -> Arc<Counts> {
    let counts = Arc::new(Counts::default());
    for i in 0..containers {
        let (h, t) = super::servers::pair(targets, i);
        for target in [h, t] {
            let counts = counts.clone();
            tokio::spawn(async move {
                let offset = period.mul_f64(rand::rng().random::<f64>());
                let mut tick = tokio::time::interval_at(Instant::now() + offset, period);
                tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
                loop {
                    tick.tick().await;
                    let ok = tokio::time::timeout(Duration::from_secs(1), once(target))
                        .await
                        .is_ok_and(|r| r.is_ok());
                    let c = if ok { &counts.done } else { &counts.failed };
                    c.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    }
    counts
}

async fn once(t: Target) -> std::io::Result<()> {
    let s = TcpSocket::new_v4()?;
    // kubelet's SO_LINGER 1 s: its close waits for the FIN's ACK (a context switch on loopback).
    // The prober leaves the linger out (no effect on the wire, docs/probes.md); the floor keeps
    // kubelet's socket, as in every figure measured against it so far.
    #[allow(deprecated)]
    s.set_linger(Some(Duration::from_secs(1)))?;
    s.set_nodelay(true)?;
    let mut stream = s.connect(t.addr).await?;
    if t.http {
        let req = format!(
            "GET /healthz HTTP/1.1\r\nHost: {}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            t.addr
        );
        stream.write_all(req.as_bytes()).await?;
        let mut buf = [0u8; 1024];
        while stream.read(&mut buf).await? > 0 {}
    }
    Ok(())
}
