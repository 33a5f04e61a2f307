//! `--probe-host-policy`: which addresses a probe that names a `host` may reach.
//!
//! kubelet honours `httpGet.host` and `tcpSocket.host` from the node's network namespace, so a
//! pod author can aim a probe at the node's loopback services (kubelet's own ports, the
//! prober's admin port) or the cloud metadata service (169.254.169.254, `fd00:ec2::254`) and
//! read the answer back through probe output and events (OpenKruise's advisory GO-2026-4549
//! for its node prober, which now rejects `host` altogether). podward decides on the *resolved*
//! address of every connection (so a DNS name cannot smuggle one in, and every redirect hop is
//! checked again), and never echoes the response body of a probe that names a host.
//! `docs/probes.md` compares the policies with kubelet's.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::spec::{Handler, PodProbes, ProbeSpec, ProbeType, SpecError};

/// The policy as this node applies it: with the node's IP, since a pod probed at the node IP is
/// a hostNetwork pod (kubelet's pod IP of a hostNetwork pod is the node's), which shares the
/// node's local addresses anyway. Probes and preStop httpGet hooks both go through one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodePolicy {
    policy: HostPolicy,
    node_ip: Option<IpAddr>,
}

impl NodePolicy {
    /// kubelet's behaviour (any address): what a prober or hook runner has until the daemon
    /// sets its configured policy (whose default is deny-local, see `Config`).
    pub const ALLOW: NodePolicy = NodePolicy {
        policy: HostPolicy::Allow,
        node_ip: None,
    };

    /// `policy` on the node whose IP is `node_ip`.
    pub fn new(policy: HostPolicy, node_ip: IpAddr) -> Self {
        Self {
            policy,
            node_ip: Some(node_ip),
        }
    }

    /// The policy itself.
    pub fn policy(self) -> HostPolicy {
        self.policy
    }

    /// Whether a pod reached at `pod_ip` is a hostNetwork pod.
    pub fn host_network(self, pod_ip: IpAddr) -> bool {
        self.node_ip == Some(pod_ip)
    }

    /// The guard for one connection to a pod at `pod_ip`.
    pub fn guard(self, pod_ip: IpAddr) -> Guard {
        self.policy.guard(self.host_network(pod_ip))
    }
}

/// What a probe's `host` field may reach.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum HostPolicy {
    /// kubelet's behaviour: any address.
    Allow,
    /// No loopback, link-local, unspecified or cloud-metadata address for a pod that is not
    /// hostNetwork (a hostNetwork pod shares those with the node anyway).
    #[default]
    DenyLocal,
    /// No probe may name a `host` (OpenKruise's choice): such a probe is a spec error.
    Deny,
}

impl HostPolicy {
    /// The flag value, as `--probe-host-policy` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::DenyLocal => "deny-local",
            Self::Deny => "deny",
        }
    }

    /// The guard for one probe of a pod (hostNetwork or not) that names a host.
    pub fn guard(self, host_network: bool) -> Guard {
        Guard {
            deny_local: self != Self::Allow && !host_network,
            #[cfg(test)]
            deny_port: None,
        }
    }

    /// Why `spec` is refused before it ever runs, if it is: under `deny`, any `host`; under
    /// `deny-local` for a pod that is not hostNetwork, a `host` that is a node-local address
    /// literal or `localhost` (a name that resolves there is caught when it is dialled). The
    /// answer is (field, message) of a spec error.
    pub fn check_spec(
        self,
        spec: &ProbeSpec,
        host_network: bool,
    ) -> Option<(&'static str, String)> {
        let (field, host) = match &spec.handler {
            Handler::HttpGet(get) => ("httpGet.host", get.host.as_deref()?),
            Handler::TcpSocket { host, .. } => ("tcpSocket.host", host.as_deref()?),
            Handler::Exec { .. } | Handler::Grpc { .. } => return None,
        };
        match self {
            Self::Allow => None,
            Self::Deny => Some((
                field,
                format!("{host:?}: a probe may not name a host (--probe-host-policy=deny)"),
            )),
            Self::DenyLocal if host_network => None,
            Self::DenyLocal => {
                let kind = literal_kind(host)?;
                Some((
                    field,
                    format!(
                        "{host:?} is a {kind} address, denied by --probe-host-policy=deny-local \
                         (the pod is not hostNetwork)"
                    ),
                ))
            }
        }
    }
}

impl HostPolicy {
    /// Drops every probe of `probes` that [`HostPolicy::check_spec`] refuses and adds its spec
    /// error (so it has no worker, and the pod's Status, log and `podward_prober_spec_errors`
    /// name it).
    pub fn deny_hosts(self, probes: &mut PodProbes, host_network: bool) {
        for (name, c) in &mut probes.containers {
            for (ty, slot) in [
                (ProbeType::Liveness, &mut c.liveness),
                (ProbeType::Readiness, &mut c.readiness),
                (ProbeType::Startup, &mut c.startup),
            ] {
                let Some(spec) = slot.as_ref() else { continue };
                if let Some((field, message)) = self.check_spec(spec, host_network) {
                    probes.errors.push(SpecError {
                        container: name.clone(),
                        field: format!("{}.{field}", ty.field_name()),
                        message,
                    });
                    *slot = None;
                }
            }
        }
    }
}

/// The node-local kind of a `host` known without resolving it: an IP literal (bracketed or
/// not) or `localhost` and its subdomains (RFC 6761: they always resolve to loopback).
fn literal_kind(host: &str) -> Option<&'static str> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return local_kind(ip);
    }
    let name = bare.strip_suffix('.').unwrap_or(bare).to_ascii_lowercase();
    (name == "localhost" || name.ends_with(".localhost")).then_some("loopback")
}

impl fmt::Display for HostPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The check a dial applies to each address it would connect to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Guard {
    deny_local: bool,
    /// Tests only: deny this port too (every test server is on loopback, so a redirect hop
    /// can only be told apart from the first by its port).
    #[cfg(test)]
    deny_port: Option<u16>,
}

impl Guard {
    /// No check (probes without a `host`: they go to the pod's own IP).
    pub const OPEN: Guard = Guard {
        deny_local: false,
        #[cfg(test)]
        deny_port: None,
    };

    /// A guard that lets loopback through but denies `port` (tests of per-hop checks).
    #[cfg(test)]
    pub(crate) fn denying_port(port: u16) -> Guard {
        Guard {
            deny_local: false,
            deny_port: Some(port),
        }
    }

    /// Why `addr` may not be dialled, if it may not.
    pub fn denies(self, addr: SocketAddr) -> Option<&'static str> {
        #[cfg(test)]
        if self.deny_port == Some(addr.port()) {
            return Some("test-denied");
        }
        if self.deny_local {
            local_kind(addr.ip())
        } else {
            None
        }
    }
}

/// AWS's IPv6 instance metadata address (IPv4's 169.254.169.254 is link-local already).
const AWS_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// What kind of node-local address `ip` is, if it is one: loopback, link-local, unspecified
/// (connecting to 0.0.0.0 or `::` reaches the local host on Linux) or a cloud metadata address.
/// IPv4-mapped and IPv4-compatible IPv6 forms count as their IPv4 address.
pub fn local_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4() {
                // `::ffff:a.b.c.d` and `::a.b.c.d` (which includes `::1` as 0.0.0.1 — loopback
                // is checked first below).
                if v6.is_loopback() {
                    return Some("loopback");
                }
                return v4_kind(v4);
            }
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if v6.segments()[0] & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if v6 == AWS_METADATA_V6 {
                Some("cloud metadata")
            } else {
                None
            }
        }
    }
}

fn v4_kind(v4: Ipv4Addr) -> Option<&'static str> {
    if v4.is_loopback() {
        Some("loopback")
    } else if v4.is_link_local() {
        Some("link-local")
    } else if v4.is_unspecified() || v4.octets()[0] == 0 {
        // 0.0.0.0/8 is "this network": Linux routes a connect to it to the local host.
        Some("unspecified")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_local_addresses_in_every_spelling_are_denied_and_others_are_not() {
        let g = HostPolicy::DenyLocal.guard(false);
        for (ip, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("169.254.169.254", "link-local"),
            ("::ffff:169.254.169.254", "link-local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fd00:ec2::254", "cloud metadata"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("::", "unspecified"),
        ] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert_eq!(g.denies(SocketAddr::new(ip, 80)), Some(kind), "{ip}");
        }
        for ip in [
            "10.0.0.1",
            "192.168.1.1",
            "8.8.8.8",
            "fd00::1",
            "2001:db8::1",
            "fec0::1",
        ] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert_eq!(g.denies(SocketAddr::new(ip, 80)), None, "{ip}");
        }
        let lo: SocketAddr = "127.0.0.1:80".parse().expect("addr");
        assert_eq!(
            HostPolicy::DenyLocal.guard(true).denies(lo),
            None,
            "hostNetwork"
        );
        assert_eq!(
            HostPolicy::Allow.guard(false).denies(lo),
            None,
            "kubelet's policy"
        );
    }

    fn with_host(handler: &str, host: &str) -> ProbeSpec {
        use crate::spec::{HttpGetSpec, HttpScheme, PortRef};
        let port = PortRef::Number(80);
        let handler = match handler {
            "http" => Handler::HttpGet(HttpGetSpec {
                scheme: HttpScheme::Http,
                host: Some(host.to_owned()),
                path: "/".into(),
                port,
                headers: vec![],
            }),
            _ => Handler::TcpSocket {
                host: Some(host.to_owned()),
                port,
            },
        };
        ProbeSpec {
            handler,
            initial_delay_seconds: 0,
            timeout: std::time::Duration::from_secs(1),
            period: std::time::Duration::from_secs(10),
            success_threshold: 1,
            failure_threshold: 3,
            termination_grace_period_seconds: None,
        }
    }

    #[test]
    fn a_local_host_literal_is_a_spec_error_unless_hostnetwork_or_allowed() {
        for host in [
            "127.0.0.1",
            "[::1]",
            "169.254.169.254",
            "LocalHost",
            "x.localhost.",
        ] {
            for h in ["http", "tcp"] {
                let (field, msg) = HostPolicy::DenyLocal
                    .check_spec(&with_host(h, host), false)
                    .unwrap_or_else(|| panic!("{host} {h} not denied"));
                assert!(
                    field.ends_with(".host") && msg.contains("deny-local"),
                    "{msg}"
                );
                assert_eq!(
                    HostPolicy::DenyLocal.check_spec(&with_host(h, host), true),
                    None
                );
                assert_eq!(
                    HostPolicy::Allow.check_spec(&with_host(h, host), false),
                    None
                );
            }
        }
        // A name is decided when it is dialled; a remote literal passes.
        for host in ["db.example", "10.0.0.7"] {
            assert_eq!(
                HostPolicy::DenyLocal.check_spec(&with_host("http", host), false),
                None
            );
        }
        let (_, msg) = HostPolicy::Deny
            .check_spec(&with_host("tcp", "10.0.0.7"), true)
            .expect("deny refuses every host");
        assert!(msg.contains("--probe-host-policy=deny"), "{msg}");
    }
}
