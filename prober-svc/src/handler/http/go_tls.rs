//! The TLS handshake redone with OpenSSL configured as kubelet's Go client, for a server whose
//! handshake rustls refused only because one handshake message passed rustls' fixed 64 KiB cap
//! (in practice a certificate chain of 64–256 KiB, which Go's client takes).
//!
//! Why a fallback and not OpenSSL for every probe: rustls is the path every ordinary probe takes,
//! and its memory and CPU per probe are the measured ones (docs/benchmarks.md); OpenSSL runs only
//! for the rare server whose handshake rustls cannot hold.
//!
//! Configured as Go's client in kubelet's probe transport: no certificate verification
//! (`InsecureSkipVerify`) but the handshake itself checked (the server's signature, `Finished`),
//! SNI as Go sends it (none for an IP literal), ALPN `h2` then `http/1.1`, TLS 1.2 and 1.3, and
//! Go's cap on the Certificate message (`maxHandshakeCertificateMsg`, 256 KiB); past it the
//! handshake fails with Go's text, the message's length found by [`oversize`].

// One FFI call: `SSL_CTX_set_max_cert_list`, a C macro the openssl crate does not wrap.
#![allow(unsafe_code)]

mod oversize;

use std::io;
use std::net::IpAddr;
use std::pin::Pin;

use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslRef,
    SslSessionCacheMode, SslVerifyMode, SslVersion,
};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_openssl::SslStream;

use self::oversize::Tap;
use crate::handler::go_text::go_errno;

/// Go's `maxHandshakeCertificateMsg`: the largest Certificate message its client reads.
pub(crate) const MAX_CERTIFICATE_MSG: usize = 262_144;

/// `SSL_CTRL_SET_MAX_CERT_LIST` (openssl/ssl.h).
const SSL_CTRL_SET_MAX_CERT_LIST: libc::c_int = 51;

/// Go's TLS 1.2 cipher suites (its default list: ECDHE with AEADs, then with CBC); TLS 1.3
/// keeps OpenSSL's three, which are Go's.
const TLS12_CIPHERS: &str = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:\
ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:\
ECDHE-RSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-SHA:ECDHE-RSA-AES128-SHA:\
ECDHE-ECDSA-AES256-SHA:ECDHE-RSA-AES256-SHA";

/// Go's key exchange groups (less its post-quantum hybrid, which OpenSSL 3.0 lacks).
const GROUPS: &str = "X25519:P-256:P-384:P-521";

/// The server's TLS 1.3 handshake traffic secret of one connection, kept to read the length of
/// a Certificate message past Go's cap (see [`oversize`]).
type Secret = Mutex<Option<Vec<u8>>>;

/// OpenSSL as Go's client; built once per prober.
pub(crate) struct GoTls {
    ctx: SslContext,
    secret: Index<Ssl, Secret>,
}

impl std::fmt::Debug for GoTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GoTls")
    }
}

/// Why the redone handshake failed. `Display` is Go's text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeError {
    /// The server's Certificate message passed Go's cap (Go's words; the length when it could
    /// be read).
    #[error("tls: handshake message of length {} bytes exceeds maximum of {MAX_CERTIFICATE_MSG} bytes", length_text(*.0))]
    TooLarge(Option<usize>),
    /// The server closed the connection.
    #[error("EOF")]
    Eof,
    /// The connection failed.
    #[error("tls: {}", go_errno(.0))]
    Io(io::Error),
    /// OpenSSL refused the handshake (its reason).
    #[error("tls: {0}")]
    Tls(String),
}

fn length_text(n: Option<usize>) -> String {
    n.map_or_else(
        || format!("more than {MAX_CERTIFICATE_MSG}"),
        |n| n.to_string(),
    )
}

impl GoTls {
    /// The client; `Err` if OpenSSL refuses the configuration.
    pub(crate) fn new() -> Result<Self, ErrorStack> {
        let secret = Ssl::new_ex_index::<Secret>()?;
        let mut b = SslContextBuilder::new(SslMethod::tls_client())?;
        // kubelet's InsecureSkipVerify: the chain is not verified. The handshake still checks the
        // server's signature with the presented key and the Finished messages.
        b.set_verify(SslVerifyMode::NONE);
        b.set_min_proto_version(Some(SslVersion::TLS1_2))?;
        b.set_max_proto_version(Some(SslVersion::TLS1_3))?;
        b.set_cipher_list(TLS12_CIPHERS)?;
        b.set_groups_list(GROUPS)?;
        // Go's floor (RSA keys of 1,024 bits and more), whatever the host's OpenSSL config says.
        b.set_security_level(1);
        b.set_alpn_protos(b"\x02h2\x08http/1.1")?;
        // kubelet's probe transport keeps no sessions (no ClientSessionCache).
        b.set_session_cache_mode(SslSessionCacheMode::OFF);
        b.set_options(SslOptions::NO_TICKET);
        // Go's cap on the Certificate message (OpenSSL's default is 100 KiB).
        // SAFETY: the context pointer is valid for the builder's life; SSL_CTX_ctrl with this
        // command only stores the number.
        unsafe {
            openssl_sys::SSL_CTX_ctrl(
                b.as_ptr(),
                SSL_CTRL_SET_MAX_CERT_LIST,
                MAX_CERTIFICATE_MSG as libc::c_long,
                std::ptr::null_mut(),
            );
        }
        // The server's handshake secret, only to read the length of a Certificate message past
        // the cap, as Go reports it (the message itself is encrypted in TLS 1.3).
        b.set_keylog_callback(move |ssl: &SslRef, line: &str| {
            if let Some(key) = oversize::server_handshake_secret(line)
                && let Some(slot) = ssl.ex_data(secret)
            {
                *slot.lock() = Some(key);
            }
        });
        Ok(Self {
            ctx: b.build(),
            secret,
        })
    }

    /// The handshake over `io` to `host` (the URL's host: a name is sent as SNI, an IP literal
    /// is not).
    pub(crate) async fn connect<S>(
        &self,
        host: &str,
        io: S,
    ) -> Result<SslStream<Tap<S>>, HandshakeError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let setup = || -> Result<Ssl, ErrorStack> {
            let mut ssl = Ssl::new(&self.ctx)?;
            ssl.set_ex_data(self.secret, Mutex::new(None));
            if let Some(name) = sni(host) {
                ssl.set_hostname(name)?;
            }
            Ok(ssl)
        };
        let ssl = setup().map_err(|e| HandshakeError::Tls(e.to_string()))?;
        let mut stream =
            SslStream::new(ssl, Tap::new(io)).map_err(|e| HandshakeError::Tls(e.to_string()))?;
        match Pin::new(&mut stream).connect().await {
            Ok(()) => {
                // Neither the first bytes nor the secret are needed past the handshake.
                stream.get_mut().stop();
                if let Some(slot) = stream.ssl().ex_data(self.secret) {
                    slot.lock().take();
                }
                Ok(stream)
            }
            Err(e) => Err(self.failure(&stream, e)),
        }
    }

    /// A failed handshake in Go's words.
    fn failure<S>(&self, stream: &SslStream<Tap<S>>, e: openssl::ssl::Error) -> HandshakeError {
        if let Some(stack) = e.ssl_error() {
            if stack.errors().iter().any(is_excessive_message) {
                let secret = stream
                    .ssl()
                    .ex_data(self.secret)
                    .and_then(|s| s.lock().take());
                let length =
                    oversize::certificate_length(stream.get_ref().seen(), secret.as_deref());
                return HandshakeError::TooLarge(length);
            }
            let reason = stack
                .errors()
                .first()
                .and_then(openssl::error::Error::reason)
                .unwrap_or("handshake failure");
            return HandshakeError::Tls(reason.to_owned());
        }
        match e.into_io_error() {
            Ok(io) if io.kind() == io::ErrorKind::UnexpectedEof => HandshakeError::Eof,
            Ok(io) => HandshakeError::Io(io),
            // A syscall error without an errno is the peer closing mid-handshake.
            Err(e) if e.code() == ErrorCode::SYSCALL || e.code() == ErrorCode::ZERO_RETURN => {
                HandshakeError::Eof
            }
            Err(e) => HandshakeError::Tls(e.to_string()),
        }
    }
}

/// OpenSSL's "excessive message size" (a handshake message over its cap).
fn is_excessive_message(e: &openssl::error::Error) -> bool {
    /// `SSL_R_EXCESSIVE_MESSAGE_SIZE` (openssl/sslerr.h).
    const SSL_R_EXCESSIVE_MESSAGE_SIZE: libc::c_int = 152;
    e.reason_code() == SSL_R_EXCESSIVE_MESSAGE_SIZE && e.library() == Some("SSL routines")
}

/// Go's `hostnameInSNI`: no SNI for an IP literal (zone and brackets aside), trailing dots
/// dropped.
fn sni(host: &str) -> Option<&str> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let bare = bare.rsplit_once('%').map_or(bare, |(h, _)| h);
    if bare.parse::<IpAddr>().is_ok() {
        return None;
    }
    let name = host.trim_end_matches('.');
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sni_is_sent_as_gos_client_sends_it() {
        assert_eq!(sni("10.0.0.1"), None);
        assert_eq!(sni("::1"), None);
        assert_eq!(sni("fe80::1%eth0"), None);
        assert_eq!(sni("probe.test"), Some("probe.test"));
        assert_eq!(sni("probe.test."), Some("probe.test"));
    }

    #[test]
    fn the_client_builds() {
        GoTls::new().expect("OpenSSL configuration");
    }
}
