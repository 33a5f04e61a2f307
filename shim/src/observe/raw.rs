//! What the readers hand the decoder: the raw bytes of one observed call, as they arrived, and
//! what happened to its response.

use bytes::{Buf, Bytes};

use super::watched::Watched;

/// What happened to the response of an observed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The whole response, trailers included, was handed to the caller's stream.
    Delivered,
    /// containerd answered but the caller had gone (hang-up, reset or deadline) first.
    Undelivered,
    /// The caller went away before containerd answered; the call was cancelled upstream.
    Abandoned,
}

/// A gRPC-framed body as it arrived: the DATA payloads, in order, not yet joined (joining is
/// the decoder's job, off the relay path).
#[derive(Debug, Clone, Default)]
pub struct Body {
    parts: Vec<Bytes>,
    len: usize,
}

impl Body {
    /// A body of one part.
    pub fn from_bytes(b: Bytes) -> Self {
        let mut body = Self::default();
        body.push(b);
        body
    }

    /// Appends a part.
    pub fn push(&mut self, part: Bytes) {
        self.len += part.len();
        self.parts.push(part);
    }

    /// Total length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The parts, in the order they arrived.
    pub(super) fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// The whole body in one buffer (a copy only when it came in several parts).
    pub fn to_bytes(&self) -> Bytes {
        match &self.parts[..] {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => Bytes::from(many.concat()),
        }
    }

    /// The first gRPC message (`[compressed:u8][len:u32 BE][message]`), read in place across
    /// the parts: a multi-MiB List is decoded without first being joined into one buffer. None
    /// for a compressed message (kubelet never compresses CRI) or a truncated body.
    pub fn first_message(&self) -> Option<impl Buf + Clone + '_> {
        let mut buf = Parts {
            parts: &self.parts,
            idx: 0,
            off: 0,
            left: self.len,
        };
        if buf.remaining() < 5 || buf.get_u8() != 0 {
            return None;
        }
        let len = usize::try_from(buf.get_u32()).ok()?;
        if buf.remaining() < len {
            return None;
        }
        buf.left = len;
        Some(buf)
    }

    /// Whether the first message carries gRPC's compressed flag.
    pub fn is_compressed(&self) -> bool {
        self.parts
            .iter()
            .find(|p| !p.is_empty())
            .is_some_and(|p| p[0] != 0)
    }
}

/// Raw bytes of one observed call, decoded later (off the relay path, see `decode.rs`).
#[derive(Debug)]
pub enum Raw {
    /// The request of a [`Watched::request_is_news`] method is complete.
    Request {
        /// Which method.
        method: Watched,
        /// The gRPC-framed request body.
        body: Body,
        /// When the request arrived (Unix ns).
        at_ns: i64,
    },
    /// The call ended.
    Call {
        /// Which method.
        method: Watched,
        /// The gRPC-framed request body (as far as it was read).
        request: Body,
        /// The gRPC-framed response body (empty for a trailers-only answer).
        response: Body,
        /// The `grpc-status` (None when the stream ended without one).
        grpc_status: Option<i32>,
        /// Whether the caller got it.
        outcome: Outcome,
        /// When the request arrived (Unix ns).
        requested_at_ns: i64,
        /// When the call ended (Unix ns).
        completed_at_ns: i64,
    },
}

impl Raw {
    /// Bytes of call bodies it holds.
    pub(super) fn body_bytes(&self) -> usize {
        match self {
            Self::Request { body, .. } => body.len(),
            Self::Call {
                request, response, ..
            } => request.len() + response.len(),
        }
    }
}

/// A window of `left` bytes over a body's parts, from part `idx`, offset `off`.
#[derive(Clone)]
struct Parts<'a> {
    parts: &'a [Bytes],
    idx: usize,
    off: usize,
    left: usize,
}

impl Buf for Parts<'_> {
    fn remaining(&self) -> usize {
        self.left
    }

    fn chunk(&self) -> &[u8] {
        match self.parts.get(self.idx) {
            Some(p) => {
                let c = &p[self.off..];
                &c[..c.len().min(self.left)]
            }
            None => &[],
        }
    }

    fn advance(&mut self, mut cnt: usize) {
        cnt = cnt.min(self.left);
        self.left -= cnt;
        while cnt > 0 {
            let Some(p) = self.parts.get(self.idx) else {
                return;
            };
            let here = p.len() - self.off;
            if cnt < here {
                self.off += cnt;
                return;
            }
            cnt -= here;
            self.idx += 1;
            self.off = 0;
        }
        // Skip empty parts so that `chunk` is never empty while bytes remain.
        while self
            .parts
            .get(self.idx)
            .is_some_and(|p| self.off >= p.len())
        {
            self.idx += 1;
            self.off = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message_of(parts: &[&'static [u8]]) -> Option<Vec<u8>> {
        let mut body = Body::default();
        for p in parts {
            body.push(Bytes::from_static(p));
        }
        let mut m = body.first_message()?;
        Some(m.copy_to_bytes(m.remaining()).to_vec())
    }

    #[test]
    fn first_message_reads_across_parts_and_rejects_truncated_and_compressed_frames() {
        assert_eq!(message_of(&[&[0, 0, 0, 0, 2, 7, 8]]), Some(vec![7, 8]));
        assert_eq!(
            message_of(&[&[0, 0], &[], &[0, 0, 3, 7], &[8], &[9, 99]]),
            Some(vec![7, 8, 9]),
            "split anywhere, the prefix included; what follows the message is not read"
        );
        assert_eq!(message_of(&[&[0, 0, 0, 0, 3, 7, 8]]), None);
        assert_eq!(message_of(&[&[1, 0, 0, 0, 1, 7]]), None);
        assert_eq!(message_of(&[&[0, 0, 0]]), None);
        assert_eq!(message_of(&[]), None);
    }
}
