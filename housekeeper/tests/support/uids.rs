//! Pod UIDs in kubelet's shape for tests that name their pods in words: the housekeeper acts only
//! on kubelet's UID shapes, so a test pod called "orphan" lives at `pods/<uid_of("orphan")>`.

#![allow(dead_code, unreachable_pub, missing_docs)]

use sha2::{Digest, Sha256};

/// A lowercase 8-4-4-4-12 UUID derived from `name` (the same name always gives the same UID).
pub fn uid_of(name: &str) -> String {
    let h = hex(&Sha256::digest(name.as_bytes())[..16]);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
