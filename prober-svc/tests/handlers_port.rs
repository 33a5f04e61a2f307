//! Port resolution (kubelet `ResolveContainerPort`) and the ports annotation, as a table.

use podward_prober::handler::port::{PortError, resolve_port};
use podward_prober::model::container_port::{
    ContainerPort, PortsAnnotationError, parse_ports_annotation,
};
use podward_prober::spec::PortRef;
use proptest::prelude::*;

fn ports() -> Vec<ContainerPort> {
    vec![
        ContainerPort {
            name: "found".into(),
            container_port: 93,
            protocol: "TCP".into(),
        },
        ContainerPort {
            name: "".into(),
            container_port: 8080,
            protocol: "TCP".into(),
        },
        ContainerPort {
            name: "huge".into(),
            container_port: 70000,
            protocol: "TCP".into(),
        },
        ContainerPort {
            name: "zero".into(),
            container_port: 0,
            protocol: "TCP".into(),
        },
    ]
}

#[test]
fn resolution_table() {
    let cases: Vec<(PortRef, Result<u16, &str>)> = vec![
        (PortRef::Number(76), Ok(76)),
        (PortRef::Number(1), Ok(1)),
        (PortRef::Number(65535), Ok(65535)),
        (PortRef::Number(0), Err("invalid port number: 0")),
        (PortRef::Number(-1), Err("invalid port number: -1")),
        (PortRef::Number(65536), Err("invalid port number: 65536")),
        (PortRef::Name("found".into()), Ok(93)),
        (PortRef::Name("118".into()), Ok(118)),
        (PortRef::Name("+118".into()), Ok(118)),
        (PortRef::Name("-1".into()), Err("invalid port number: -1")),
        // Go compares names with ==, so "" finds the first unnamed port (validation keeps "" out).
        (PortRef::Name("".into()), Ok(8080)),
        (
            PortRef::Name("not-found".into()),
            Err(r#"strconv.Atoi: parsing "not-found": invalid syntax"#),
        ),
        (
            PortRef::Name("http".into()),
            Err(r#"strconv.Atoi: parsing "http": invalid syntax"#),
        ),
        (
            PortRef::Name("99999999999999999999".into()),
            Err(r#"strconv.Atoi: parsing "99999999999999999999": value out of range"#),
        ),
        (
            PortRef::Name("99999".into()),
            Err("invalid port number: 99999"),
        ),
        (
            PortRef::Name("huge".into()),
            Err("invalid port number: 70000"),
        ),
        (PortRef::Name("zero".into()), Err("invalid port number: 0")),
    ];
    let ports = ports();
    for (port, want) in cases {
        let got = resolve_port(&port, &ports).map_err(|e| e.to_string());
        assert_eq!(got, want.map_err(str::to_owned), "port {port:?}");
    }
}

#[test]
fn only_the_containers_own_ports_are_searched() {
    assert!(resolve_port(&PortRef::Name("found".into()), &[]).is_err());
    assert_eq!(
        resolve_port(&PortRef::Name("".into()), &[]).map_err(|e| e.to_string()),
        Err(r#"strconv.Atoi: parsing "": invalid syntax"#.to_owned())
    );
}

#[test]
fn ports_annotation_as_kubelet_writes_it() {
    let json = r#"[{"name":"http","containerPort":8080,"protocol":"TCP"},{"containerPort":53,"protocol":"UDP"},{"name":"m","containerPort":9090}]"#;
    let ports = parse_ports_annotation(json).expect("parse");
    assert_eq!(
        ports,
        vec![
            ContainerPort {
                name: "http".into(),
                container_port: 8080,
                protocol: "TCP".into()
            },
            ContainerPort {
                name: "".into(),
                container_port: 53,
                protocol: "UDP".into()
            },
            ContainerPort {
                name: "m".into(),
                container_port: 9090,
                protocol: "TCP".into()
            },
        ]
    );
    assert_eq!(
        resolve_port(&PortRef::Name("http".into()), &ports),
        Ok(8080)
    );
}

#[test]
fn port_without_number_resolves_to_an_invalid_port() {
    // k8s-openapi fills a missing containerPort with 0; resolution then refuses it.
    let ports = parse_ports_annotation(r#"[{"name":"x"}]"#).expect("parse");
    assert_eq!(
        resolve_port(&PortRef::Name("x".into()), &ports),
        Err(PortError::Invalid(0))
    );
}

#[test]
fn bad_ports_annotations_are_errors_not_panics() {
    for bad in [
        "",
        "{",
        "{}",
        "[1]",
        r#"[{"containerPort":"80"}]"#,
        r#"[{"containerPort":1e99}]"#,
        "null",
    ] {
        assert!(
            matches!(parse_ports_annotation(bad), Err(PortsAnnotationError(_))),
            "{bad:?}"
        );
    }
}

proptest! {
    #[test]
    fn ports_annotation_never_panics(s in ".{0,200}") {
        let _ = parse_ports_annotation(&s);
    }

    #[test]
    fn resolve_never_panics_and_only_yields_valid_ports(name in ".{0,30}", n in any::<i32>()) {
        for port in [PortRef::Name(name.clone()), PortRef::Number(n)] {
            if let Ok(p) = resolve_port(&port, &ports()) {
                prop_assert!(p >= 1);
            }
        }
    }
}
