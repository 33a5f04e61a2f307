//! The webhook's serving certificate, read from PEM files and picked up again when they change
//! (a Secret volume swaps them in place on rotation), without a restart and without dropping a
//! connection: each TLS handshake takes the certificate current at that moment.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::metrics::AdmissionMetrics;

/// Why a certificate and key pair could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM of the expected kind.
    #[error("{}: {message}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the pair (an unsupported key, or a key that does not match the certificate).
    #[error("serving certificate: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The files of the serving certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// PEM certificate chain, the serving certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The current serving certificate, and the file contents it came from.
struct Current {
    key: Arc<CertifiedKey>,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

/// Hands each handshake the current certificate; [`CertReloader::reload`] replaces it when the
/// files changed and parse.
pub struct CertReloader {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Current>,
}

impl std::fmt::Debug for CertReloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertReloader")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl CertReloader {
    /// Loads `files`; an error when they are unreadable (the webhook cannot serve without them).
    pub fn load(files: CertFiles, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let (cert_pem, key_pem) = read_pair(&files)?;
        let key = Arc::new(certified(&files, &cert_pem, &key_pem, &provider)?);
        Ok(Self {
            files,
            provider,
            current: RwLock::new(Current {
                key,
                cert_pem,
                key_pem,
            }),
        })
    }

    /// Reads the files again: `Ok(true)` when they changed and the new pair is in use,
    /// `Ok(false)` when unchanged, an error when they changed into something unusable (the
    /// previous pair stays in use: a half-written rotation never stops the webhook).
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (cert_pem, key_pem) = read_pair(&self.files)?;
        {
            let cur = self.current.read();
            if cur.cert_pem == cert_pem && cur.key_pem == key_pem {
                return Ok(false);
            }
        }
        let key = Arc::new(certified(&self.files, &cert_pem, &key_pem, &self.provider)?);
        *self.current.write() = Current {
            key,
            cert_pem,
            key_pem,
        };
        Ok(true)
    }

    /// Checks the files every `period` until the task is dropped, counting each change.
    pub async fn watch(self: Arc<Self>, period: Duration, metrics: AdmissionMetrics) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            match self.reload() {
                Ok(false) => {}
                Ok(true) => {
                    metrics.cert_reloads.with_label_values(&["ok"]).inc();
                    tracing::info!(cert = %self.files.cert.display(),
                        "serving certificate changed on disk: new handshakes use the new one");
                }
                Err(e) => {
                    metrics.cert_reloads.with_label_values(&["error"]).inc();
                    tracing::warn!(error = %e,
                        "serving certificate files changed but cannot be used; the previous certificate stays in use");
                }
            }
        }
    }
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().key.clone())
    }
}

/// A rustls server configuration that serves `reloader`'s certificate, HTTP/2 or HTTP/1.1.
pub fn server_config(
    reloader: Arc<CertReloader>,
    provider: Arc<CryptoProvider>,
) -> Result<rustls::ServerConfig, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(reloader);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn read_pair(files: &CertFiles) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    Ok((read(&files.cert)?, read(&files.key)?))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn certified(
    files: &CertFiles,
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Pem {
            path: files.cert.clone(),
            message: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Pem {
            path: files.cert.clone(),
            message: "no CERTIFICATE block".to_owned(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::Pem {
        path: files.key.clone(),
        message: e.to_string(),
    })?;
    Ok(CertifiedKey::from_der(chain, key, provider)?)
}
