//! HPACK-decoded header blocks, reduced to the few fields the reader uses.
//!
//! Every header block of a direction goes through that direction's decoder, watched or not:
//! HPACK's dynamic table is shared by all streams, so skipping one block would garble the next.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use httlib_hpack::Decoder;

use super::frames::FrameError;

/// HPACK's initial dynamic table size (RFC 7541 §4.2, HTTP/2's SETTINGS_HEADER_TABLE_SIZE
/// default).
const INITIAL_TABLE: u32 = 4096;

/// Largest dynamic table a peer may ask for. gRPC stacks use HPACK's default 4 KiB; a peer
/// that advertises more may make its encoder use more, up to this. Beyond it the reader stops
/// observing the connection (its bytes still flow).
const MAX_TABLE: u32 = 64 << 10;

/// What a header block says that the reader needs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Fields {
    /// `:path` (request headers).
    pub(crate) path: Option<String>,
    /// `grpc-timeout` (request headers).
    pub(crate) grpc_timeout: Option<Duration>,
    /// `grpc-status` (trailers, or a trailers-only response).
    pub(crate) grpc_status: Option<i32>,
}

impl Fields {
    fn take(&mut self, name: &[u8], value: &[u8]) {
        match name {
            b":path" => self.path = Some(String::from_utf8_lossy(value).into_owned()),
            b"grpc-timeout" => self.grpc_timeout = parse_grpc_timeout(value),
            b"grpc-status" => {
                self.grpc_status = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok());
            }
            _ => {}
        }
    }
}

/// One direction's HPACK decoder.
pub(crate) struct HeaderDecoder {
    inner: Decoder<'static>,
}

impl std::fmt::Debug for HeaderDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeaderDecoder")
    }
}

impl HeaderDecoder {
    /// A decoder with HPACK's initial table.
    pub(crate) fn new() -> Self {
        let mut inner = Decoder::with_dynamic_size(INITIAL_TABLE);
        inner.set_max_dynamic_size(MAX_TABLE);
        Self { inner }
    }

    /// Decodes one complete header block.
    pub(crate) fn decode(&mut self, block: &[u8]) -> Result<Fields, FrameError> {
        let mut buf = block.to_vec();
        let mut out = Vec::new();
        let inner = &mut self.inner;
        // The input is hostile; a decoder bug must cost the observation of one connection,
        // never the relay task that copies its bytes.
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| inner.decode(&mut buf, &mut out)));
        match r {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(FrameError::Hpack(format!("{e:?}"))),
            Err(_) => return Err(FrameError::Hpack("decoder panicked".to_owned())),
        }
        let mut fields = Fields::default();
        for (name, value, _) in &out {
            fields.take(name, value);
        }
        Ok(fields)
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

    #[test]
    fn garbage_blocks_are_errors_not_panics() {
        let mut d = HeaderDecoder::new();
        // An index far past the tables; a size update beyond the allowed maximum; an integer
        // cut short (which panics inside the crate: caught).
        assert!(d.decode(&[0xff, 0xff, 0xff, 0x0f]).is_err());
        let mut d = HeaderDecoder::new();
        assert!(d.decode(&[0x3f, 0xff, 0xff, 0x7f, 0x82]).is_err());
        let mut d = HeaderDecoder::new();
        assert!(d.decode(&[0x7f, 0x80]).is_err());
    }

    #[test]
    fn rfc7541_huffman_request_decodes_and_the_table_follows() {
        // RFC 7541 C.4.1 and C.4.2: the second block refers to the first's table entry.
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
                .collect()
        };
        let mut d = HeaderDecoder::new();
        let f = d
            .decode(&hex("828684418cf1e3c2e5f23a6ba0ab90f4ff"))
            .expect("C.4.1");
        assert_eq!(f.path.as_deref(), Some("/"));
        let f = d.decode(&hex("828684be5886a8eb10649cbf")).expect("C.4.2");
        assert_eq!(f.path.as_deref(), Some("/"));
    }
}
