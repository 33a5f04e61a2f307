//! TLS for HTTPS probes: kubelet sets `InsecureSkipVerify`, so any certificate is accepted (the
//! handshake signature is still checked against the presented key, as Go does), and offers ALPN
//! `h2` then `http/1.1` like Go's transport with HTTP/2 enabled. Built once per prober.
//!
//! Every handshake starts with rustls. rustls caps each handshake message at 64 KiB (a constant
//! of the crate), where Go's client takes a Certificate message up to 256 KiB; a handshake
//! rustls refuses for that cap alone is redone on a new connection with OpenSSL configured as
//! Go's client (`go_tls`). rustls stays the path of every ordinary probe: its memory and CPU per
//! probe are the measured ones.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use prometheus::IntCounter;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, InvalidMessage, SignatureScheme};
use tokio::io::{AsyncRead, ReadBuf};

use super::go_tls::GoTls;

/// The TLS clients of HTTPS probes.
#[derive(Debug)]
pub(crate) struct Clients {
    /// rustls, where every handshake starts (`None` if it failed to build at start-up).
    pub(crate) rustls: Option<Arc<ClientConfig>>,
    /// OpenSSL as Go's client, for a handshake rustls refused for its message cap alone
    /// (`None` if it failed to build at start-up).
    pub(crate) go: Option<GoTls>,
    /// Handshakes redone with `go` (`podward_prober_tls_fallback_total` when exported).
    pub(crate) fallbacks: IntCounter,
}

impl Clients {
    /// Both clients; one that fails to build is logged and left out.
    pub(crate) fn new() -> Self {
        let rustls = client_config()
            .inspect_err(|e| {
                tracing::error!(error = %e, "TLS configuration failed; HTTPS probes will fail");
            })
            .ok();
        let go = GoTls::new()
            .inspect_err(|e| {
                tracing::error!(
                    error = %e,
                    "OpenSSL configuration failed; HTTPS probes of servers whose certificate chain passes 64 KiB will fail"
                );
            })
            .ok();
        Self {
            rustls,
            go,
            fallbacks: unexported_fallbacks(),
        }
    }
}

/// The fallback counter of a prober that exports none.
pub(crate) fn unexported_fallbacks() -> IntCounter {
    IntCounter::new("podward_prober_tls_fallback_total", "unexported")
        .unwrap_or_else(|_| unreachable!("a valid metric name"))
}

/// Whether rustls refused a handshake only because a handshake message passed its 64 KiB cap:
/// its `HandshakePayloadTooLarge`, or the full message buffer that the same overflow gives when
/// the message's header lengths are what push it over the cap.
pub(crate) fn over_rustls_cap(e: &io::Error) -> bool {
    let Some(inner) = e.get_ref() else {
        return false;
    };
    if let Some(rustls::Error::InvalidMessage(InvalidMessage::HandshakePayloadTooLarge)) =
        inner.downcast_ref::<rustls::Error>()
    {
        return true;
    }
    e.kind() == io::ErrorKind::InvalidData && inner.to_string() == "message buffer full"
}

/// The shared client config; `Err` only if the ring provider refused the default TLS versions.
pub(crate) fn client_config() -> Result<Arc<ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let algorithms = provider.signature_verification_algorithms;
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCert { algorithms }))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[derive(Debug)]
struct AcceptAnyCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The server's side of a connection keeps its first five bytes, the header of the first TLS
/// record, so that a handshake the server answered in plain HTTP is told from other failures as
/// Go's client tells it (a `RecordHeaderError` whose header is `HTTP/`).
pub(crate) struct FirstBytes<S> {
    inner: S,
    first: [u8; 5],
    len: usize,
}

impl<S> FirstBytes<S> {
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            first: [0; 5],
            len: 0,
        }
    }

    /// The server's first bytes were `HTTP/`: it answered the ClientHello in plain HTTP.
    pub(crate) fn answered_http(&self) -> bool {
        self.len == self.first.len() && &self.first == b"HTTP/"
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FirstBytes<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if this.len < this.first.len() {
            let read = &buf.filled()[before..];
            let n = read.len().min(this.first.len() - this.len);
            this.first[this.len..this.len + n].copy_from_slice(&read[..n]);
            this.len += n;
        }
        Poll::Ready(Ok(()))
    }
}

crate::handler::write_through::write_through!(FirstBytes);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_shapes_of_rustls_message_cap_overflow_are_recognised() {
        let too_large = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidMessage(InvalidMessage::HandshakePayloadTooLarge),
        );
        assert!(over_rustls_cap(&too_large));
        // The same overflow when the message's headers push it over the cap.
        let buffer_full = io::Error::new(io::ErrorKind::InvalidData, "message buffer full");
        assert!(over_rustls_cap(&buffer_full));
        for other in [
            io::Error::new(
                io::ErrorKind::InvalidData,
                rustls::Error::InvalidMessage(InvalidMessage::InvalidContentType),
            ),
            io::Error::new(io::ErrorKind::InvalidData, "received plaintext buffer full"),
            io::Error::from(io::ErrorKind::ConnectionReset),
            io::Error::from(io::ErrorKind::UnexpectedEof),
        ] {
            assert!(!over_rustls_cap(&other), "{other}");
        }
    }
}
