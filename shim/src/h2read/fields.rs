//! HPACK-decoded header blocks, reduced to the few fields the reader uses.
//!
//! Every header block of a direction goes through that direction's decoder, watched or not:
//! HPACK's dynamic table is shared by all streams, so skipping one block would garble the next.

use std::borrow::Cow;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use loona_hpack::Decoder;

use super::frames::FrameError;

/// Largest dynamic table a peer may ask for. gRPC stacks use HPACK's default 4 KiB; a peer
/// that advertises more may make its encoder use more, up to this. Beyond it the reader stops
/// observing the connection (its bytes still flow).
const MAX_TABLE: usize = 64 << 10;

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
        let mut inner = Decoder::new();
        inner.set_max_allowed_table_size(MAX_TABLE);
        Self { inner }
    }

    /// Decodes one complete header block.
    pub(crate) fn decode(&mut self, block: &[u8]) -> Result<Fields, FrameError> {
        let mut fields = Fields::default();
        let inner = &mut self.inner;
        // The input is hostile; a decoder bug must cost the observation of one connection,
        // never the relay task that copies its bytes.
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
            inner.decode_with_cb(block, |n: Cow<'_, [u8]>, v: Cow<'_, [u8]>| {
                fields.take(&n, &v)
            })
        }));
        match r {
            Ok(Ok(())) => Ok(fields),
            Ok(Err(e)) => Err(FrameError::Hpack(format!("{e:?}"))),
            Err(_) => Err(FrameError::Hpack("decoder panicked".to_owned())),
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

    #[test]
    fn garbage_blocks_are_errors_not_panics() {
        let mut d = HeaderDecoder::new();
        // An index far past the tables, then a size update beyond the allowed maximum.
        assert!(d.decode(&[0xff, 0xff, 0xff, 0x0f]).is_err());
        let mut d = HeaderDecoder::new();
        assert!(d.decode(&[0x3f, 0xff, 0xff, 0x7f, 0x82]).is_err());
    }
}
