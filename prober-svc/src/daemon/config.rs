//! Flags, environment and config file, layered into one typed [`Config`] (defaults < TOML file <
//! `PODWARD_PROBER_*` environment < flags): the [`Args`] in `flags.rs`, the [`Config`] in
//! `typed.rs`, what the Kubernetes side takes from it in `kubernetes.rs`.

mod flags;
mod kubernetes;
mod typed;

pub use self::flags::Args;
pub use self::kubernetes::InvalidSetting;
pub use self::typed::{Config, detect_node_ip};
pub use crate::direct_exec::ExecMode;

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use clap::Parser;

    use super::*;

    #[test]
    fn flags_override_defaults() {
        let args = Args::try_parse_from([
            "podward-prober",
            "--node-ip",
            "127.0.0.1",
            "--kube-version",
            "1.30",
        ])
        .expect("parse");
        let c: Config = podward_api::daemon::config::load(None, &args).expect("load");
        assert_eq!(c.node_ip, Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(c.kube_version, "1.30");
        assert_eq!(c.socket, Config::default().socket);
    }

    #[test]
    fn probe_families_stay_on_metrics_unless_turned_off() {
        let load = |argv: &[&str]| -> Result<bool, String> {
            let args =
                Args::try_parse_from(std::iter::once("podward-prober").chain(argv.iter().copied()))
                    .map_err(|e| e.to_string())?;
            podward_api::daemon::config::load::<Config, _>(None, &args)
                .map(|c| c.metrics_with_probes)
                .map_err(|e| e.to_string())
        };
        assert_eq!(load(&[]), Ok(true));
        assert_eq!(load(&["--metrics-with-probes"]), Ok(true));
        assert_eq!(load(&["--metrics-with-probes=false"]), Ok(false));
        // A value needs `=`: `--metrics-with-probes false` is a stray argument, not "false".
        assert!(load(&["--metrics-with-probes", "false"]).is_err());
    }

    #[test]
    fn the_exec_standby_is_on_unless_turned_off_and_takes_only_a_bool() {
        let load = |argv: &[&str]| -> Result<bool, String> {
            let args =
                Args::try_parse_from(std::iter::once("podward-prober").chain(argv.iter().copied()))
                    .map_err(|e| e.to_string())?;
            podward_api::daemon::config::load::<Config, _>(None, &args)
                .map(|c| c.exec_standby)
                .map_err(|e| e.to_string())
        };
        assert_eq!(load(&[]), Ok(true));
        assert_eq!(load(&["--exec-standby"]), Ok(true));
        assert_eq!(load(&["--exec-standby=false"]), Ok(false));
        for bad in ["--exec-standby=no", "--exec-standby=", "--exec-standby=0"] {
            assert!(load(&[bad]).is_err(), "{bad} must be refused");
        }
        assert!(load(&["--exec-standby", "false"]).is_err());
    }

    #[test]
    fn detected_node_ip_is_usable() {
        assert!(!detect_node_ip().is_unspecified());
    }
}
