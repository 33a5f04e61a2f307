//! How a path appears in a reason or an error: its exact bytes, never a huge line.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A path in a reason is cut to this many characters (kept: its start and its end), so a deep
/// tree of long names cannot make a reason, or a plan of them, huge.
const MAX_PATH_CHARS: usize = 1024;

/// `path` as a reason shows it: its exact bytes ([`podward_api::outside_text::from_bytes`]), cut
/// in the middle past [`MAX_PATH_CHARS`].
pub(crate) fn shown(path: &Path) -> String {
    let text = podward_api::outside_text::from_bytes(path.as_os_str().as_bytes());
    let n = text.chars().count();
    if n <= MAX_PATH_CHARS {
        return text;
    }
    let keep = MAX_PATH_CHARS / 2;
    let head: String = text.chars().take(keep).collect();
    let tail: String = text.chars().skip(n - keep).collect();
    format!("{head}…({} characters left out)…{tail}", n - 2 * keep)
}
