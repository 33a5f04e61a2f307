//! What a probe came to, as the prober counts, keeps and publishes it: the [`Outcome`] the
//! prober's retries make of a handler's answer (or of its errors), the [`ProbeResult`] a worker
//! counts and caches, and kubelet's limit on probe output.
//!
//! The limit: 10 KiB of exec output or HTTP body is read, and every output the prober keeps or
//! sends (`Status`, `Watch` and Kubernetes events, a kill's record) is cut to the same size,
//! once, where a worker takes a probe's outcome ([`Outcome::capped`]).

/// Largest probe output kept (kubelet's `maxReadLength` / `LimitWriter` size).
pub const MAX_OUTPUT_BYTES: usize = 10 * 1024;

/// `text` cut to at most [`MAX_OUTPUT_BYTES`], on a character boundary.
pub fn capped(text: &str) -> &str {
    if text.len() <= MAX_OUTPUT_BYTES {
        return text;
    }
    let mut end = MAX_OUTPUT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// What one probe came to, with its output (kubelet's `probe.Result` and output string;
/// kubelet's `Unknown` is either a Failure or an error, so it has no variant of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The check passed.
    Success(String),
    /// A pass kubelet reports as a `ProbeWarning` event (an HTTP redirect to another host).
    Warning(String),
    /// The check failed.
    Failure(String),
    /// The handler errored on every attempt, with the last error's message (kubelet: "probe
    /// errored and resulted in unknown state"); the worker discards the probe. The prober's
    /// retries (`crate::probing::probe`) make it; a handler's answer has no such variant.
    Errored(String),
}

impl Outcome {
    /// What a worker counts towards its thresholds: Success (a warning too) or Failure; `None`
    /// for an errored probe.
    pub fn result(&self) -> Option<ProbeResult> {
        match self {
            Self::Success(_) | Self::Warning(_) => Some(ProbeResult::Success),
            Self::Failure(_) => Some(ProbeResult::Failure),
            Self::Errored(_) => None,
        }
    }

    /// The output (for an errored probe, the error's message).
    pub fn output(&self) -> &str {
        match self {
            Self::Success(o) | Self::Warning(o) | Self::Failure(o) | Self::Errored(o) => o,
        }
    }

    /// This outcome with its output cut to kubelet's limit ([`MAX_OUTPUT_BYTES`]). A worker
    /// applies it to every outcome it is handed, so what it keeps and publishes (its status,
    /// events, a kill's record) is capped once, whichever runner produced it.
    pub fn capped(self) -> Self {
        let cut = |mut o: String| {
            o.truncate(capped(&o).len());
            o
        };
        match self {
            Self::Success(o) => Self::Success(cut(o)),
            Self::Warning(o) => Self::Warning(cut(o)),
            Self::Failure(o) => Self::Failure(cut(o)),
            Self::Errored(o) => Self::Errored(cut(o)),
        }
    }
}

/// A probe's result, kubelet's `results.Result`: what a probe yields (Success or Failure), what
/// a worker counts towards its thresholds, and what it caches and publishes once a threshold is
/// reached (where Unknown is startup's initial value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeResult {
    /// Not determined yet (startup's initial value); never the result of a probe.
    Unknown,
    /// The probe passed.
    Success,
    /// The probe failed.
    Failure,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_a_character_boundary() {
        assert_eq!(capped("short"), "short");
        let long = "é".repeat(MAX_OUTPUT_BYTES);
        let cut = capped(&long);
        assert_eq!(cut.len(), MAX_OUTPUT_BYTES);
        let odd = format!("a{long}");
        assert_eq!(capped(&odd).len(), MAX_OUTPUT_BYTES - 1);
    }
}
