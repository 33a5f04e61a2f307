//! What the Kubernetes side takes from the [`Config`]: the API client's settings and the node
//! lease's, checked, so that a setting that cannot work stops the start rather than the first
//! request.

use std::time::Duration;

use super::typed::Config;
use crate::kubernetes::ApiSettings;
use crate::kubernetes::lease::{LeaseSettings, lease_namespace};

/// A setting that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting {setting}: {message}")]
pub struct InvalidSetting {
    /// The flag.
    pub setting: &'static str,
    /// Why.
    pub message: String,
}

impl Config {
    /// How to use the Kubernetes API; `None` without a node name (the API side stays off).
    pub fn api_settings(&self) -> Result<Option<ApiSettings>, InvalidSetting> {
        let rate = |setting: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(v)
            } else {
                Err(InvalidSetting {
                    setting,
                    message: format!("{v} is not a positive number"),
                })
            }
        };
        let burst = |setting: &'static str, v: u32| {
            if v > 0 {
                Ok(v)
            } else {
                Err(InvalidSetting {
                    setting,
                    message: "must be at least 1".to_owned(),
                })
            }
        };
        let qps = rate("--kube-api-qps", self.kube_api_qps)?;
        let event_qps = rate("--event-qps", self.event_qps)?;
        let kube_burst = burst("--kube-api-burst", self.kube_api_burst)?;
        let event_burst = burst("--event-burst", self.event_burst)?;
        let gate = self.readiness_gate_condition.trim();
        if gate.is_empty() || gate.chars().any(char::is_whitespace) {
            return Err(InvalidSetting {
                setting: "--readiness-gate-condition",
                message: format!("{gate:?} is not a condition type"),
            });
        }
        let Some(node) = self.node_name() else {
            return Ok(None);
        };
        Ok(Some(ApiSettings {
            node_name: node.to_owned(),
            kubeconfig: self.kubeconfig.clone(),
            qps,
            burst: kube_burst,
            event_qps,
            event_burst,
            gate_condition: gate.to_owned(),
        }))
    }

    /// The node's name, trimmed; `None` when unset or blank (the Kubernetes side stays off).
    fn node_name(&self) -> Option<&str> {
        self.node_name
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
    }

    /// How to keep the node lease; `None` without a node name or with a duration of 0.
    pub fn lease_settings(&self) -> Result<Option<LeaseSettings>, InvalidSetting> {
        let interval = self.node_lease_renew_interval_seconds;
        let duration = self.node_lease_duration_seconds;
        if duration == 0 {
            return Ok(None);
        }
        if interval == 0 || interval >= duration {
            return Err(InvalidSetting {
                setting: "--node-lease-renew-interval-seconds",
                message: format!(
                    "{interval} must be at least 1 and less than --node-lease-duration-seconds ({duration})"
                ),
            });
        }
        let Some(node) = self.node_name() else {
            return Ok(None);
        };
        Ok(Some(LeaseSettings {
            namespace: lease_namespace(self.lease_namespace.as_deref()),
            node: node.to_owned(),
            renew_interval: Duration::from_secs(interval),
            duration: Duration::from_secs(duration),
            handover: self.lease_handover(),
        }))
    }
}

impl Config {
    /// The node lease's hand-over at shutdown; `None` when turned off (0).
    pub fn lease_handover(&self) -> Option<Duration> {
        (self.node_lease_handover_seconds > 0)
            .then(|| Duration::from_secs(self.node_lease_handover_seconds))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::daemon::config::flags::Args;

    #[test]
    fn the_api_side_needs_a_node_name_and_sane_rates() {
        let load = |argv: &[&str]| -> Config {
            let mut all = vec!["podward-prober"];
            all.extend_from_slice(argv);
            let args = Args::try_parse_from(all).expect("parse");
            podward_api::daemon::config::load(None, &args).expect("load")
        };
        assert_eq!(load(&[]).api_settings(), Ok(None));
        let s = load(&[
            "--node-name",
            "node-a",
            "--kube-api-qps",
            "5",
            "--kube-api-burst",
            "10",
        ])
        .api_settings()
        .expect("valid")
        .expect("on");
        assert_eq!(s.node_name, "node-a");
        assert_eq!((s.qps, s.burst), (5.0, 10));
        assert_eq!((s.event_qps, s.event_burst), (50.0, 100));
        assert_eq!(s.gate_condition, "podward.io/ready");
        assert_eq!(s.kubeconfig, None);
        let bad = load(&["--node-name", "n", "--kube-api-qps", "0"]).api_settings();
        assert_eq!(bad.map_err(|e| e.setting), Err("--kube-api-qps"));
        let bad = load(&["--node-name", "n", "--readiness-gate-condition", " "]).api_settings();
        assert_eq!(
            bad.map_err(|e| e.setting),
            Err("--readiness-gate-condition")
        );
    }
}
