//! "Hold the next response of method X": the caller's deadline passes while containerd's
//! answer sits in the shim, which is how an undelivered result happens in real life.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{oneshot, watch};

/// Armed holds, by method path.
#[derive(Clone, Default, Debug)]
pub(super) struct Holds {
    armed: Arc<Mutex<Vec<Armed>>>,
}

#[derive(Debug)]
struct Armed {
    path: String,
    held: Option<oneshot::Sender<()>>,
    release: watch::Receiver<bool>,
}

/// Handle on one armed hold.
#[derive(Debug)]
pub struct HeldResponse {
    held: Option<oneshot::Receiver<()>>,
    release: watch::Sender<bool>,
}

impl HeldResponse {
    /// Resolves once a response is being held (containerd has answered).
    pub async fn wait_held(&mut self) {
        if let Some(rx) = self.held.take() {
            let _ = rx.await;
        }
    }

    /// Lets the held response go (also done on drop).
    pub fn release(&self) {
        let _ = self.release.send(true);
    }
}

impl Drop for HeldResponse {
    fn drop(&mut self) {
        self.release();
    }
}

impl Holds {
    pub(super) fn arm(&self, path: &str) -> HeldResponse {
        let (held_tx, held_rx) = oneshot::channel();
        let (rel_tx, rel_rx) = watch::channel(false);
        self.armed.lock().push(Armed {
            path: path.to_owned(),
            held: Some(held_tx),
            release: rel_rx,
        });
        HeldResponse {
            held: Some(held_rx),
            release: rel_tx,
        }
    }

    pub(super) fn is_armed(&self) -> bool {
        !self.armed.lock().is_empty()
    }

    pub(super) fn holds(&self, path: &str) -> bool {
        self.armed.lock().iter().any(|a| a.path == path)
    }

    /// Starts holding the response to `path` if a hold for it is armed (the hold is then spent,
    /// and its handle told that a response is held).
    pub(super) fn start(&self, path: &str) -> Option<Waiting> {
        let mut a = {
            let mut armed = self.armed.lock();
            let i = armed.iter().position(|a| a.path == path)?;
            armed.remove(i)
        };
        if let Some(tx) = a.held.take() {
            let _ = tx.send(());
        }
        Some(Waiting { release: a.release })
    }
}

/// A response being held, until its handle lets it go.
#[derive(Debug)]
pub(super) struct Waiting {
    release: watch::Receiver<bool>,
}

impl Waiting {
    /// Released explicitly, or the handle was dropped (its sender gone): either way, go on.
    pub(super) fn is_over(&self) -> bool {
        *self.release.borrow() || self.release.has_changed().is_err()
    }
}
