//! What the reader takes from a gRPC call's header blocks: the fields it asks the HPACK
//! decoder to keep ([`WANTED`], each cut to a cap) and what they say ([`Fields`]).

use std::time::Duration;

use crate::h2read::{FieldValue, HeaderBlock, Wanted, WantedField};

/// The header fields kept from every block, in the order [`Fields::of`] reads them.
pub(crate) const WANTED: Wanted = Wanted::new(&[
    // A gRPC path is "/<service>/<method>"; CRI's are under 64 bytes.
    WantedField {
        name: b":path",
        keep: 1024,
    },
    WantedField {
        name: b"grpc-status",
        keep: 16,
    },
    WantedField {
        name: b"grpc-message",
        keep: 1024,
    },
    WantedField {
        name: b"grpc-timeout",
        keep: 16,
    },
]);
const PATH: usize = 0;
const GRPC_STATUS: usize = 1;
const GRPC_MESSAGE: usize = 2;
const GRPC_TIMEOUT: usize = 3;

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
}

impl Fields {
    /// What `block` (decoded keeping [`WANTED`]) says.
    pub(crate) fn of(block: &HeaderBlock) -> Self {
        let text = |i| {
            block
                .get(i)
                .map(|v: FieldValue<'_>| String::from_utf8_lossy(v.bytes()).into_owned())
        };
        Self {
            // A path longer than the reader keeps is no method it watches: its first bytes
            // name it in the metrics.
            path: text(PATH),
            grpc_timeout: block
                .get(GRPC_TIMEOUT)
                .and_then(FieldValue::whole)
                .and_then(parse_grpc_timeout),
            grpc_status: block
                .get(GRPC_STATUS)
                .and_then(FieldValue::whole)
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.trim().parse().ok()),
            grpc_message: text(GRPC_MESSAGE),
        }
    }
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
