//! The length of a Certificate message past Go's cap, as Go's error names it. OpenSSL stops at
//! the message's header without saying the length, so the handshake's first bytes are kept
//! ([`Tap`]) and read again: in TLS 1.2 the message is in the clear; in TLS 1.3 the records
//! after the ServerHello are opened with the server's handshake traffic secret (from OpenSSL's
//! key log, for this connection only), as RFC 8446 §7 derives the record keys.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use openssl::md::{Md, MdRef};
use openssl::pkey::Id;
use openssl::pkey_ctx::{HkdfMode, PkeyCtx};
use openssl::symm::{Cipher, decrypt_aead};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most of a handshake's first bytes kept: the ServerHello, EncryptedExtensions and a
/// CertificateRequest (each at most 64 KiB in Go) before the Certificate's first record are
/// a few KiB in practice.
const KEEP: usize = 64 << 10;

/// TLS record content types.
const CHANGE_CIPHER_SPEC: u8 = 20;
const HANDSHAKE: u8 = 22;
const APPLICATION_DATA: u8 = 23;

/// Handshake message types.
const SERVER_HELLO: u8 = 2;
const CERTIFICATE: u8 = 11;

/// A stream that keeps the first bytes read from it, until [`Tap::stop`].
#[derive(Debug)]
pub(crate) struct Tap<S> {
    inner: S,
    seen: Vec<u8>,
    keeping: bool,
}

impl<S> Tap<S> {
    pub(super) fn new(inner: S) -> Self {
        Self {
            inner,
            seen: Vec::new(),
            keeping: true,
        }
    }

    /// Stops keeping (the handshake is done) and frees what was kept.
    pub(super) fn stop(&mut self) {
        self.keeping = false;
        self.seen = Vec::new();
    }

    /// What was kept.
    pub(super) fn seen(&self) -> &[u8] {
        &self.seen
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tap<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if this.keeping {
            let new = &buf.filled()[before..];
            let room = KEEP.saturating_sub(this.seen.len());
            this.seen.extend_from_slice(&new[..new.len().min(room)]);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tap<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The secret of a key log line naming the server's handshake traffic secret.
pub(super) fn server_handshake_secret(line: &str) -> Option<Vec<u8>> {
    let mut fields = line.split_ascii_whitespace();
    if fields.next()? != "SERVER_HANDSHAKE_TRAFFIC_SECRET" {
        return None;
    }
    let hex = fields.nth(1)?;
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The declared length of the server's Certificate message in the handshake bytes `seen`, with
/// the server's TLS 1.3 handshake `secret` if any; `None` if they do not reach its header.
pub(super) fn certificate_length(seen: &[u8], secret: Option<&[u8]>) -> Option<usize> {
    let mut clear = Vec::new();
    let mut opened = Vec::new();
    let mut keys: Option<Keys> = None;
    let mut rest = seen;
    while rest.len() >= 5 {
        let (header, after) = rest.split_at(5);
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        let body = after.get(..len)?;
        rest = &after[len..];
        match header[0] {
            HANDSHAKE if keys.is_none() => {
                clear.extend_from_slice(body);
                // TLS 1.2: the Certificate follows the ServerHello in the clear.
                if let Some(n) = certificate_in(&clear) {
                    return Some(n);
                }
            }
            CHANGE_CIPHER_SPEC => {}
            APPLICATION_DATA => {
                if keys.is_none() {
                    keys = Some(Keys::new(server_hello_suite(&clear)?, secret?)?);
                }
                let keys = keys.as_mut()?;
                let (content, ty) = keys.open(header, body)?;
                if ty == HANDSHAKE {
                    opened.extend_from_slice(&content);
                    if let Some(n) = certificate_in(&opened) {
                        return Some(n);
                    }
                }
            }
            _ => return None,
        }
    }
    None
}

/// The length of the first Certificate message whose header is in `hs` (whole messages
/// before it).
fn certificate_in(hs: &[u8]) -> Option<usize> {
    let mut at = 0;
    while let Some(h) = hs.get(at..at + 4) {
        let n = usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3]);
        if h[0] == CERTIFICATE {
            return Some(n);
        }
        at += 4 + n;
    }
    None
}

/// The cipher suite of the last ServerHello in `hs` (after a HelloRetryRequest, the second).
fn server_hello_suite(hs: &[u8]) -> Option<u16> {
    let mut at = 0;
    let mut suite = None;
    while let Some(h) = hs.get(at..at + 4) {
        let n = usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3]);
        let body = hs.get(at + 4..at + 4 + n)?;
        if h[0] == SERVER_HELLO {
            // legacy_version (2), random (32), session id (1 + its length), cipher suite (2).
            let sid = usize::from(*body.get(34)?);
            let s = body.get(35 + sid..37 + sid)?;
            suite = Some(u16::from_be_bytes([s[0], s[1]]));
        }
        at += 4 + n;
    }
    suite
}

/// The server's TLS 1.3 handshake record keys.
struct Keys {
    cipher: Cipher,
    key: Vec<u8>,
    iv: Vec<u8>,
    seq: u64,
}

impl Keys {
    fn new(suite: u16, secret: &[u8]) -> Option<Self> {
        let (cipher, md, key_len): (Cipher, &MdRef, usize) = match suite {
            0x1301 => (Cipher::aes_128_gcm(), Md::sha256(), 16),
            0x1302 => (Cipher::aes_256_gcm(), Md::sha384(), 32),
            0x1303 => (Cipher::chacha20_poly1305(), Md::sha256(), 32),
            _ => return None,
        };
        // The secret is the suite's hash length.
        if secret.len() != md.size() {
            return None;
        }
        Some(Self {
            cipher,
            key: expand_label(md, secret, b"key", key_len)?,
            iv: expand_label(md, secret, b"iv", 12)?,
            seq: 0,
        })
    }

    /// Opens one record: its content and inner content type.
    fn open(&mut self, header: &[u8], body: &[u8]) -> Option<(Vec<u8>, u8)> {
        let (data, tag) = body.split_at(body.len().checked_sub(16)?);
        let mut nonce = self.iv.clone();
        for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *n ^= s;
        }
        self.seq += 1;
        let mut plain =
            decrypt_aead(self.cipher, &self.key, Some(&nonce), header, data, tag).ok()?;
        // Padding zeros, then the content type.
        while plain.last() == Some(&0) {
            plain.pop();
        }
        let ty = plain.pop()?;
        Some((plain, ty))
    }
}

/// HKDF-Expand-Label(secret, label, "", len) (RFC 8446 §7.1).
fn expand_label(md: &MdRef, secret: &[u8], label: &[u8], len: usize) -> Option<Vec<u8>> {
    let mut info = Vec::with_capacity(10 + label.len());
    info.extend_from_slice(&u16::try_from(len).ok()?.to_be_bytes());
    info.push(u8::try_from(6 + label.len()).ok()?);
    info.extend_from_slice(b"tls13 ");
    info.extend_from_slice(label);
    info.push(0);
    let derive = || -> Result<Vec<u8>, openssl::error::ErrorStack> {
        let mut ctx = PkeyCtx::new_id(Id::HKDF)?;
        ctx.derive_init()?;
        ctx.set_hkdf_mode(HkdfMode::EXPAND_ONLY)?;
        ctx.set_hkdf_md(md)?;
        ctx.set_hkdf_key(secret)?;
        ctx.add_hkdf_info(&info)?;
        let mut out = vec![0; len];
        ctx.derive(Some(&mut out))?;
        Ok(out)
    };
    derive().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls12_certificate_header_is_read_in_the_clear() {
        // ServerHello (empty body for the walk), then a Certificate declaring 300,000 bytes.
        let mut hs = vec![SERVER_HELLO, 0, 0, 2, 3, 3];
        hs.extend_from_slice(&[CERTIFICATE, 0x04, 0x93, 0xe0, 0, 0]);
        let mut seen = vec![HANDSHAKE, 3, 3, 0, hs.len() as u8];
        seen.extend_from_slice(&hs);
        assert_eq!(certificate_length(&seen, None), Some(300_000));
    }

    #[test]
    fn bytes_short_of_the_header_give_no_length() {
        let seen = [HANDSHAKE, 3, 3, 0, 6, SERVER_HELLO, 0, 0, 2, 3, 3];
        assert_eq!(certificate_length(&seen, None), None);
        assert_eq!(
            certificate_length(&[APPLICATION_DATA, 3, 3, 0, 20], None),
            None
        );
    }

    #[test]
    fn only_the_servers_handshake_secret_is_taken_from_the_key_log() {
        assert_eq!(
            server_handshake_secret("SERVER_HANDSHAKE_TRAFFIC_SECRET 00ff 0a0B"),
            Some(vec![0x0a, 0x0b])
        );
        assert_eq!(
            server_handshake_secret("CLIENT_HANDSHAKE_TRAFFIC_SECRET 00ff 0a0b"),
            None
        );
        assert_eq!(
            server_handshake_secret("SERVER_HANDSHAKE_TRAFFIC_SECRET 00ff 0a0"),
            None
        );
    }
}
