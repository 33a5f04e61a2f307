//! Where the prober's leases live, for the daemon and the sentinel alike.

/// The leases' namespace: `configured`, else POD_NAMESPACE (the downward API), else `podward`.
pub fn lease_namespace(configured: Option<&str>) -> String {
    configured
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|n| !n.is_empty())
        })
        .unwrap_or_else(|| "podward".to_owned())
}
