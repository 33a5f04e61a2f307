//! The relay's settings and the parts every connection shares, and the read sizes and drain time
//! each connection thread works with.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::fault::Faults;
use crate::observe::Recorder;

/// Default read buffer per direction of a connection (containerd's side; the client's is at most
/// [`REQUEST_BUFFER`]). Every read costs the relay a wake-up, the reader's set-up and a write
/// whatever its size, and containerd's socket often holds more than 64 KiB during a large
/// answer, so reading it 128 KiB at a time takes a multi-MiB List in fewer, cheaper steps; past
/// that, reads seldom fill the buffer (docs/benchmarks.md, Shim).
pub const DEFAULT_BUFFER: usize = 128 << 10;

/// The most a client's bytes are read at once (the read buffer above if smaller). A client's
/// side carries small requests, but also whatever header blocks a client chooses to send, and
/// the side reader decodes each chunk before the connection's thread looks at containerd's side
/// again: a smaller chunk bounds how long one client sending header blocks as fast as it can
/// holds up its own answers, at no cost to requests of ordinary size.
pub const REQUEST_BUFFER: usize = 16 << 10;

/// How long containerd may take to answer what was in flight once the client side of a
/// connection has gone (its answer tells whether a mutating call took effect).
pub(super) const DRAIN_AFTER_CLIENT: Duration = Duration::from_secs(5);

/// The relay's settings and shared parts.
pub struct Relay {
    /// containerd's socket.
    pub containerd: PathBuf,
    /// Where finished calls go.
    pub recorder: Arc<Recorder>,
    /// Armed faults (test builds).
    pub faults: Faults,
    /// A client must send the HTTP/2 connection preface within this.
    pub handshake_timeout: Duration,
    /// On shutdown, how long in-flight calls may take to finish.
    pub shutdown_grace: Duration,
    /// On shutdown, how long calls whose own deadline is later may take, at most.
    pub max_shutdown_grace: Duration,
    /// Read buffer per direction.
    pub buffer: usize,
    /// Most connections relayed at once (one thread each).
    pub max_connections: usize,
}
