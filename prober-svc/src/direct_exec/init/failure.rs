//! How a stage of the helper fails before the command runs: with a message, reported on the
//! control socket (`failed …`) by whichever process met it.

/// A stage's result: the message says what failed.
pub(super) type Res<T> = Result<T, String>;

/// Maps an error to "`what`: the error".
pub(super) fn err<E: std::fmt::Display>(what: impl std::fmt::Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}
