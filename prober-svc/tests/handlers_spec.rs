//! The `podward.io/probes` annotation: Kubernetes defaults, validation errors naming container and
//! field, isolation of bad probes, and hostile input.

use std::time::Duration;

use podward_prober::spec::{
    Handler, HttpGetSpec, HttpScheme, PortRef, ProbeSpec, ProbeType, parse_pod_probes,
};
use proptest::prelude::*;

fn errors(annotation: &str) -> Vec<String> {
    parse_pod_probes(annotation)
        .errors
        .iter()
        .map(|e| format!("{}|{}|{}", e.container, e.field, e.message))
        .collect()
}

#[test]
fn defaults_are_applied() {
    let p = parse_pod_probes(r#"{"web": {"livenessProbe": {"httpGet": {"port": 8080}}}}"#);
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let spec = p.containers["web"].liveness.clone().expect("liveness");
    assert_eq!(
        spec,
        ProbeSpec {
            handler: Handler::HttpGet(HttpGetSpec {
                scheme: HttpScheme::Http,
                host: None,
                path: "/".into(),
                port: PortRef::Number(8080),
                headers: vec![],
            }),
            initial_delay_seconds: 0,
            timeout: Duration::from_secs(1),
            period: Duration::from_secs(10),
            success_threshold: 1,
            failure_threshold: 3,
            termination_grace_period_seconds: None,
        }
    );
}

#[test]
fn explicit_zero_means_default_and_values_are_kept() {
    let p = parse_pod_probes(
        r#"{"c": {"readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "timeoutSeconds": 0, "periodSeconds": 0,
            "successThreshold": 0, "failureThreshold": 0, "initialDelaySeconds": 15},
          "startupProbe": {"tcpSocket": {"port": "http", "host": "10.0.0.1"}, "timeoutSeconds": 5, "periodSeconds": 2,
            "failureThreshold": 60, "terminationGracePeriodSeconds": 5},
          "livenessProbe": {"grpc": {"port": 5000, "service": "svc"}}}}"#,
    );
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let c = &p.containers["c"];
    let r = c.readiness.clone().expect("readiness");
    assert_eq!(
        (
            r.timeout,
            r.period,
            r.success_threshold,
            r.failure_threshold,
            r.initial_delay_seconds
        ),
        (Duration::from_secs(1), Duration::from_secs(10), 1, 3, 15)
    );
    assert_eq!(
        r.handler,
        Handler::Exec {
            command: vec!["cat".into(), "/tmp/ready".into()]
        }
    );
    let s = c.startup.clone().expect("startup");
    assert_eq!(
        (
            s.timeout,
            s.period,
            s.failure_threshold,
            s.termination_grace_period_seconds
        ),
        (Duration::from_secs(5), Duration::from_secs(2), 60, Some(5))
    );
    assert_eq!(
        s.handler,
        Handler::TcpSocket {
            host: Some("10.0.0.1".into()),
            port: PortRef::Name("http".into())
        }
    );
    assert_eq!(
        c.get(ProbeType::Liveness).map(|l| l.handler.clone()),
        Some(Handler::Grpc {
            port: 5000,
            service: Some("svc".into())
        })
    );
}

#[test]
fn http_fields_scheme_headers_and_host() {
    let p = parse_pod_probes(
        r#"{"c": {"livenessProbe": {"httpGet": {"scheme": "HTTPS", "host": "", "path": "/h?x=1", "port": "web",
            "httpHeaders": [{"name": "X-A", "value": "1"}, {"name": "x-a", "value": "2"}]}}}}"#,
    );
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    let Some(Handler::HttpGet(get)) = p.containers["c"].liveness.clone().map(|s| s.handler) else {
        panic!("http")
    };
    assert_eq!(get.scheme, HttpScheme::Https);
    assert_eq!(get.host, None, "empty host means the pod IP");
    assert_eq!(get.path, "/h?x=1");
    assert_eq!(
        get.headers,
        vec![("X-A".into(), "1".into()), ("x-a".into(), "2".into())]
    );
}

#[test]
fn each_validation_error_names_container_and_field() {
    let cases = [
        (
            r#"{"c": {"livenessProbe": {"exec": {"command": ["x"]}, "successThreshold": 2}}}"#,
            "c|livenessProbe.successThreshold|Invalid value: 2: must be 1",
        ),
        (
            r#"{"c": {"startupProbe": {"exec": {"command": ["x"]}, "successThreshold": 3}}}"#,
            "c|startupProbe.successThreshold|Invalid value: 3: must be 1",
        ),
        (
            r#"{"c": {"readinessProbe": {"exec": {"command": ["x"]}, "terminationGracePeriodSeconds": 5}}}"#,
            "c|readinessProbe.terminationGracePeriodSeconds|Invalid value: 5: must not be set for readinessProbes",
        ),
        (
            r#"{"c": {"livenessProbe": {"exec": {"command": ["x"]}, "terminationGracePeriodSeconds": 0}}}"#,
            "c|livenessProbe.terminationGracePeriodSeconds|Invalid value: 0: must be greater than 0",
        ),
        (
            r#"{"c": {"livenessProbe": {"exec": {"command": ["x"]}, "periodSeconds": -1}}}"#,
            "c|livenessProbe.periodSeconds|Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            r#"{"c": {"livenessProbe": {"exec": {"command": ["x"]}, "timeoutSeconds": -5}}}"#,
            "c|livenessProbe.timeoutSeconds|Invalid value: -5: must be greater than or equal to 0",
        ),
        (
            r#"{"c": {"livenessProbe": {"exec": {"command": ["x"]}, "initialDelaySeconds": -1}}}"#,
            "c|livenessProbe.initialDelaySeconds|Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            r#"{"c": {"livenessProbe": {"exec": {"command": ["x"]}, "failureThreshold": -2}}}"#,
            "c|livenessProbe.failureThreshold|Invalid value: -2: must be greater than or equal to 0",
        ),
        (
            r#"{"c": {"livenessProbe": {}}}"#,
            "c|livenessProbe|Required value: must specify a handler type",
        ),
        (
            r#"{"c": {"livenessProbe": {"exec": {"command": ["x"]}, "tcpSocket": {"port": 1}}}}"#,
            "c|livenessProbe.tcpSocket|Forbidden: may not specify more than 1 handler type",
        ),
        (
            r#"{"c": {"livenessProbe": {"exec": {}}}}"#,
            "c|livenessProbe.exec.command|Required value",
        ),
        (
            r#"{"c": {"livenessProbe": {"grpc": {"port": 0}}}}"#,
            "c|livenessProbe.grpc.port|Invalid value: 0: must be between 1 and 65535, inclusive",
        ),
        (
            r#"{"c": {"livenessProbe": {"grpc": {"port": 65536}}}}"#,
            "c|livenessProbe.grpc.port|Invalid value: 65536: must be between 1 and 65535, inclusive",
        ),
        (
            r#"{"c": {"livenessProbe": {"httpGet": {"port": 70000}}}}"#,
            "c|livenessProbe.httpGet.port|Invalid value: 70000: must be between 1 and 65535, inclusive",
        ),
        (
            r#"{"c": {"livenessProbe": {"httpGet": {"port": 80, "scheme": "FTP"}}}}"#,
            r#"c|livenessProbe.httpGet.scheme|Unsupported value: "FTP": supported values: "HTTP", "HTTPS""#,
        ),
        (
            r#"{"c": {"livenessProbe": {"tcpSocket": {"port": "Http"}}}}"#,
            r#"c|livenessProbe.tcpSocket.port|Invalid value: "Http": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"#,
        ),
        (
            r#"{"c": {"livenessProbe": {"tcpSocket": {"port": "8080"}}}}"#,
            r#"c|livenessProbe.tcpSocket.port|Invalid value: "8080": must contain at least one letter (a-z)"#,
        ),
        (
            r#"{"c": {"livenessProbe": {"httpGet": {"port": 1, "httpHeaders": [{"name": "bad name", "value": "v"}]}}}}"#,
            "c|livenessProbe.httpGet.httpHeaders[0].name|Invalid value: \"bad name\": a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
        ),
    ];
    for (annotation, want) in cases {
        let errs = errors(annotation);
        assert!(
            errs.iter().any(|e| e == want),
            "{annotation}\n got {errs:?}\nwant {want}"
        );
        assert!(
            parse_pod_probes(annotation).containers["c"]
                .liveness
                .is_none()
                || !want.contains("livenessProbe")
        );
    }
}

#[test]
fn a_bad_probe_drops_only_itself() {
    let p = parse_pod_probes(
        r#"{"a": {"livenessProbe": {"exec": {"command": ["ok"]}}, "readinessProbe": {"exec": {"command": ["ok"]}, "terminationGracePeriodSeconds": 1}},
            "b": {"livenessProbe": {"tcpSocket": {"port": 80}}},
            "c": "not an object",
            "d": {"startupProbe": {"httpGet": {"port": "x", "path": 7}}, "image": "busybox", "livenessProbe": null}}"#,
    );
    assert!(p.containers["a"].liveness.is_some());
    assert!(p.containers["a"].readiness.is_none());
    assert!(p.containers["b"].liveness.is_some());
    assert!(!p.containers.contains_key("c"));
    assert!(p.containers["d"].startup.is_none() && p.containers["d"].liveness.is_none());
    let named: Vec<(String, String)> = p
        .errors
        .iter()
        .map(|e| (e.container.clone(), e.field.clone()))
        .collect();
    assert!(
        named.contains(&(
            "a".into(),
            "readinessProbe.terminationGracePeriodSeconds".into()
        )),
        "{named:?}"
    );
    assert!(named.contains(&("c".into(), "".into())), "{named:?}");
    assert!(
        named.contains(&("d".into(), "startupProbe".into())),
        "{named:?}"
    );
    assert_eq!(p.errors.len(), 3, "{:?}", p.errors);
    let shown = p.errors.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert!(
        shown
            .iter()
            .any(|s| s
                .starts_with("container \"a\": readinessProbe.terminationGracePeriodSeconds: ")),
        "{shown:?}"
    );
}

#[test]
fn hostile_inputs_are_reported_not_panicked_on() {
    for bad in [
        "",
        "{",
        "[]",
        "null",
        "42",
        "\"str\"",
        "{\"c\": 1}",
        "{\"c\": []}",
    ] {
        let p = parse_pod_probes(bad);
        assert!(p.containers.values().all(|c| c.liveness.is_none()));
        assert_eq!(p.errors.len(), 1, "{bad:?}: {:?}", p.errors);
    }
    // Numbers that do not fit, wrong types.
    for probe in [
        r#"{"exec": {"command": ["x"]}, "periodSeconds": 99999999999999999999}"#,
        r#"{"exec": {"command": ["x"]}, "periodSeconds": 1.5}"#,
        r#"{"exec": {"command": ["x"]}, "periodSeconds": "10"}"#,
        r#"{"exec": {"command": "x"}}"#,
        r#"{"grpc": {"port": "5000"}}"#,
        r#"{"httpGet": {"port": true}}"#,
        r#"{"exec": {"command": ["x"]}, "terminationGracePeriodSeconds": 1e300}"#,
        r#"[1,2]"#,
    ] {
        let errs = errors(&format!(r#"{{"c": {{"livenessProbe": {probe}}}}}"#));
        assert_eq!(errs.len(), 1, "{probe}: {errs:?}");
        assert!(
            errs[0].starts_with("c|livenessProbe|invalid probe: "),
            "{errs:?}"
        );
    }
    // Deeply nested JSON hits serde_json's recursion limit, not the stack.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(parse_pod_probes(&deep).errors.len(), 1);
}

#[test]
fn one_mib_annotation_is_handled() {
    // ~1 MiB of valid containers: parsed (this is the ceiling).
    let mut s = String::from("{");
    let mut i = 0;
    while s.len() < (1 << 20) - 200 {
        s.push_str(&format!(
            r#""c{i}": {{"livenessProbe": {{"tcpSocket": {{"port": 80}}}}}},"#
        ));
        i += 1;
    }
    s.push_str(r#""last": {}}"#);
    let p = parse_pod_probes(&s);
    assert!(p.errors.is_empty());
    assert_eq!(p.containers.len(), i + 1);
    // Just over the ceiling: refused before parsing.
    let over = format!("{}{}", s, " ".repeat(1 << 20));
    let p = parse_pod_probes(&over);
    assert!(p.containers.is_empty());
    assert_eq!(p.errors.len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_strings_never_panic(s in ".{0,300}") {
        let _ = parse_pod_probes(&s);
    }

    #[test]
    fn arbitrary_probe_fields_never_panic_and_valid_specs_respect_minimums(
        period in proptest::option::of(any::<i64>()),
        timeout in proptest::option::of(-3i64..100),
        success in proptest::option::of(-3i64..5),
        failure in proptest::option::of(-3i64..5),
        grace in proptest::option::of(any::<i64>()),
        port in any::<i64>(),
        kind in 0usize..4,
        ty in 0usize..3,
    ) {
        let handler = match kind {
            0 => r#""exec": {"command": ["x"]}"#.to_owned(),
            1 => format!(r#""httpGet": {{"port": {port}}}"#),
            2 => format!(r#""tcpSocket": {{"port": {port}}}"#),
            _ => format!(r#""grpc": {{"port": {port}}}"#),
        };
        let mut fields = vec![handler];
        for (name, v) in [("periodSeconds", period), ("timeoutSeconds", timeout), ("successThreshold", success),
                          ("failureThreshold", failure), ("terminationGracePeriodSeconds", grace)] {
            if let Some(v) = v { fields.push(format!(r#""{name}": {v}"#)); }
        }
        let key = ["livenessProbe", "readinessProbe", "startupProbe"][ty];
        let p = parse_pod_probes(&format!(r#"{{"c": {{"{key}": {{{}}}}}}}"#, fields.join(",")));
        for spec in [&p.containers["c"].liveness, &p.containers["c"].readiness, &p.containers["c"].startup].into_iter().flatten() {
            prop_assert!(spec.period >= Duration::from_secs(1) && spec.timeout >= Duration::from_secs(1));
            prop_assert!(spec.success_threshold >= 1 && spec.failure_threshold >= 1);
            prop_assert!(spec.termination_grace_period_seconds.is_none_or(|g| g > 0));
        }
        let valid = p.containers["c"].get([ProbeType::Liveness, ProbeType::Readiness, ProbeType::Startup][ty]).is_some();
        prop_assert_eq!(valid, p.errors.is_empty());
    }
}
