//! What a header block says that the reader uses, as the HPACK decoder (`hpack.rs`) leaves it.
//!
//! Every header block of a direction goes through that direction's decoder, watched or not:
//! HPACK's dynamic table is shared by all streams, so skipping one block would garble the next.

use std::time::Duration;

/// What a header block says that the reader needs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Fields {
    /// `:path` (request headers; its first bytes when longer than the reader keeps).
    pub(crate) path: Option<String>,
    /// `grpc-timeout` (request headers).
    pub(crate) grpc_timeout: Option<Duration>,
    /// `grpc-status` (trailers, or a trailers-only response).
    pub(crate) grpc_status: Option<i32>,
    /// `grpc-message`, as sent (percent-encoded), cut to its first bytes when long.
    pub(crate) grpc_message: Option<String>,
    /// The header list's size as SETTINGS_MAX_HEADER_LIST_SIZE counts it (RFC 9113 §6.5.2).
    pub(crate) list_size: u64,
}

/// Parses a `grpc-timeout` value (`<1..8 digits><unit>`, unit one of H M S m u n; gRPC's
/// PROTOCOL-HTTP2.md).
pub(crate) fn parse_grpc_timeout(v: &[u8]) -> Option<Duration> {
    if v.len() < 2 || v.len() > 9 {
        return None;
    }
    let (digits, unit) = v.split_at(v.len() - 1);
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(n.checked_mul(3600)?),
        b"M" => Duration::from_secs(n.checked_mul(60)?),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_units() {
        for (v, want) in [
            ("2S", Some(Duration::from_secs(2))),
            ("150m", Some(Duration::from_millis(150))),
            ("1H", Some(Duration::from_secs(3600))),
            ("7u", Some(Duration::from_micros(7))),
            ("S", None),
            ("12x", None),
            ("123456789S", None),
        ] {
            assert_eq!(parse_grpc_timeout(v.as_bytes()), want, "{v}");
        }
    }
}
