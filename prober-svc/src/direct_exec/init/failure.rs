//! How a stage of the helper fails before the command runs: with a message, reported on the
//! control socket (`failed …`) by whichever process met it.

use std::io::Write;
use std::os::unix::net::UnixStream;

use crate::direct_exec::plan::Report;

/// A stage's result: the message says what failed.
pub(super) type Res<T> = Result<T, String>;

/// Maps an error to "`what`: the error".
pub(super) fn err<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}

/// Reports `message` as the probe's failure on the control socket (`failed …`). A socket that is
/// gone leaves nobody to tell, so its error is dropped.
pub(super) fn report_failed(control: &UnixStream, message: String) {
    let _ = (&*control).write_all(Report::Failed(message).line().as_bytes());
}

/// Ends a forked stage with its exit code, or, when it failed, with its failure reported and
/// runc's 125 (the command never started).
pub(super) fn exit_with(control: &UnixStream, result: Res<i32>) -> ! {
    let code = result.unwrap_or_else(|e| {
        report_failed(control, e);
        125
    });
    std::process::exit(code)
}
