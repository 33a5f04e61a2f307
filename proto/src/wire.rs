//! The names that the daemons' APIs advertise in their first message (`capabilities`), and the
//! release each daemon sends beside them. The rules of the wire contract are in
//! docs/architecture.md ("Wire contract"): a field or value is only ever added, a removed one is
//! `reserved`, and a peer relies on a newer behaviour only when its capability is advertised.

/// This build's release (the workspace version), sent as `server_version`/`client_version`.
pub const RELEASE: &str = env!("CARGO_PKG_VERSION");

/// Shim: `Snapshot.complete` is set, and a Watch's first snapshot waits for the index rebuild.
/// Without it, a snapshot of a connected shim is taken as complete (the older shim's meaning).
pub const SHIM_SNAPSHOT_COMPLETE: &str = "snapshot-complete";

/// Shim: `stop_requested_at_ns` is kept (a zero means "kubelet has not asked to stop").
/// Without it a zero says nothing, and a consumer treats every stop as possibly requested.
pub const SHIM_STOP_REQUESTED: &str = "stop-requested";

/// Whether `capabilities` (a peer's first message) lists `name`.
pub fn advertises(capabilities: &[String], name: &str) -> bool {
    capabilities.iter().any(|c| c == name)
}

/// Response metadata key of the sender's release, on every answer of the Prober and
/// Housekeeper APIs (their first message of each stream, and each unary answer, carry it in
/// their response headers).
pub const VERSION_HEADER: &str = "podward-server-version";

/// Response metadata key of the sender's capabilities, comma-separated (none yet for the Prober
/// and Housekeeper APIs).
pub const CAPABILITIES_HEADER: &str = "podward-capabilities";

/// `message` as a response that says this release and `capabilities` in its headers.
pub fn announced<T>(message: T, capabilities: &[&str]) -> tonic::Response<T> {
    let mut r = tonic::Response::new(message);
    let m = r.metadata_mut();
    m.insert(
        VERSION_HEADER,
        tonic::metadata::MetadataValue::from_static(RELEASE),
    );
    if let Ok(v) = capabilities.join(",").parse() {
        m.insert(CAPABILITIES_HEADER, v);
    }
    r
}

/// The release and capabilities a response's headers announce (empty when the sender is older
/// than the announcement).
pub fn announcement(metadata: &tonic::metadata::MetadataMap) -> (String, Vec<String>) {
    let get = |k| {
        metadata
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let caps = get(CAPABILITIES_HEADER)
        .split(',')
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect();
    (get(VERSION_HEADER), caps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_reads_back_and_an_older_sender_announces_nothing() {
        let r = announced((), &["a", "b"]);
        let (v, caps) = announcement(r.metadata());
        assert_eq!(v, RELEASE);
        assert_eq!(caps, ["a", "b"]);
        assert!(advertises(&caps, "b") && !advertises(&caps, "c"));
        let old = tonic::Response::new(());
        assert_eq!(announcement(old.metadata()), (String::new(), Vec::new()));
    }
}
