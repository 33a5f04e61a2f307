//! The shutdown signal: SIGTERM (what kubelet and systemd send) or SIGINT (an operator's ^C).

use tokio::signal::unix::{SignalKind, signal};

/// Resolves on the first SIGTERM or SIGINT. If the handlers cannot be installed (which only
/// happens when the runtime has no signal driver) it never resolves and logs why.
pub async fn shutdown() {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; SIGTERM will not stop this process");
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received, shutting down"),
        _ = int.recv() => tracing::info!("SIGINT received, shutting down"),
    }
}
