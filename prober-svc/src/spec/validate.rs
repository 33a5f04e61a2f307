//! Field errors worded like the API server's (`field.Invalid`, `field.Required`...) and the
//! name checks of `k8s.io/apimachinery/pkg/util/validation` that probes use.

use std::fmt::Debug;

/// `validation.IsValidPortNum`'s message.
pub(super) const PORT_RANGE_MSG: &str = "must be between 1 and 65535, inclusive";

/// Errors of one probe, with paths under `root`.
pub(super) struct FieldErrors {
    root: &'static str,
    errs: Vec<(String, String)>,
}

impl FieldErrors {
    pub(super) fn new(root: &'static str) -> Self {
        Self {
            root,
            errs: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, field: &str, message: String) {
        self.errs.push((format!("{}.{field}", self.root), message));
    }

    /// An error at `path`, a full path (it already starts with the root).
    pub(super) fn push_path(&mut self, message: String, path: String) {
        self.errs.push((path, message));
    }

    pub(super) fn push_root(&mut self, message: String) {
        self.errs.push((self.root.to_owned(), message));
    }

    /// `field.Invalid`; `Debug` quotes strings and prints numbers bare, as Go's `%#v`-ish output.
    pub(super) fn invalid(&mut self, field: &str, value: impl Debug, detail: &str) {
        self.push(field, format!("Invalid value: {value:?}: {detail}"));
    }

    pub(super) fn required(&mut self, field: &str, detail: &str) {
        let msg = if detail.is_empty() {
            "Required value".to_owned()
        } else {
            format!("Required value: {detail}")
        };
        self.push(field, msg);
    }

    /// `ValidateNonnegativeField`.
    pub(super) fn non_negative(&mut self, field: &str, value: i64) {
        if value < 0 {
            self.invalid(field, value, "must be greater than or equal to 0");
        }
    }

    pub(super) fn len(&self) -> usize {
        self.errs.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.errs.is_empty()
    }

    pub(super) fn into_vec(self) -> Vec<(String, String)> {
        self.errs
    }
}

/// `validation.IsValidPortName`: 1–15 of `[-a-z0-9]`, at least one letter, no `--`, no hyphen at
/// either end. A numeric string such as "8080" is therefore rejected, as by the API server.
pub(super) fn port_name(name: &str, field: &str, errs: &mut FieldErrors) {
    if name.len() > 15 {
        errs.invalid(field, name, "must be no more than 15 characters");
    }
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        errs.invalid(
            field,
            name,
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
        );
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.invalid(field, name, "must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        errs.invalid(field, name, "must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        errs.invalid(field, name, "must not begin or end with a hyphen");
    }
}

/// `validation.IsHTTPHeaderName`: `[-A-Za-z0-9]+`.
pub(super) fn header_name(name: &str, field: &str, errs: &mut FieldErrors) {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        errs.invalid(
            field,
            name,
            "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
        );
    }
}
