use std::fmt::Write as _;

use prometheus::{IntCounter, IntGauge};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// One self-rendered family, `name 1`.
struct Family(&'static str);

impl TextMetrics for Family {
    fn render(&self, _from: u64, out: &mut String) -> Option<u64> {
        write_header(out, self.0, "a self-rendered family", "gauge");
        let _ = writeln!(out, "{} 1", self.0);
        None
    }
}

/// `# TYPE` names of a text page, in order.
fn families(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect()
}

fn render(admin: &Admin, path: &str) -> Option<String> {
    let body = admin.render_page(path)?.expect("encode");
    Some(
        body.map(|c| String::from_utf8_lossy(&c).into_owned())
            .collect(),
    )
}

/// An admin with two registry families and a page showing one of them plus its own family.
fn admin_with_page() -> Admin {
    let mut admin = Admin::new();
    let shared = IntGauge::new("shared_seconds", "on both pages").expect("gauge");
    let only_main = IntCounter::new("only_main_total", "on /metrics only").expect("counter");
    admin.registry.register(Box::new(shared)).expect("register");
    admin
        .registry
        .register(Box::new(only_main))
        .expect("register");
    admin.add_text(Arc::new(Family("main_text")));
    admin
        .add_page(
            "/metrics/extra",
            MetricsPage {
                families: vec!["shared_seconds".into(), "not_registered".into()],
                text: vec![Arc::new(Family("page_text"))],
            },
        )
        .expect("add page");
    admin
}

#[test]
fn a_page_serves_exactly_its_families_and_metrics_keeps_everything() {
    let admin = admin_with_page();
    let page = render(&admin, "/metrics/extra").expect("page");
    assert_eq!(families(&page), ["shared_seconds", "page_text"], "{page}");
    let main = render(&admin, "/metrics").expect("/metrics");
    let names = families(&main);
    for name in ["shared_seconds", "only_main_total", "main_text"] {
        assert!(
            names.contains(&name),
            "{name} missing from /metrics: {names:?}"
        );
    }
    assert!(!names.contains(&"page_text"), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("process_")),
        "the process collector stays on /metrics: {names:?}"
    );
    assert!(render(&admin, "/metrics/other").is_none());
    assert_eq!(admin.metrics_paths(), ["/metrics", "/metrics/extra"]);
}

#[test]
fn a_page_cannot_take_a_built_in_path_a_taken_one_or_a_relative_one() {
    let mut admin = admin_with_page();
    for path in [
        "/metrics",
        "/healthz",
        "/readyz",
        "/metrics/extra",
        "metrics/x",
        "/",
        "",
    ] {
        let e = admin
            .add_page(path, MetricsPage::default())
            .expect_err(path);
        assert_eq!(e.path, path);
    }
    assert_eq!(admin.metrics_paths(), ["/metrics", "/metrics/extra"]);
}

async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    String::from_utf8(buf).expect("utf-8")
}

#[tokio::test]
async fn the_endpoint_serves_added_pages_and_names_them_on_a_miss() {
    let admin = admin_with_page();
    let listener = bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stop = crate::daemon::stop::Stop::new();
    let served = tokio::spawn(admin.serve(listener, stop.stopped()));

    let page = get(addr, "/metrics/extra").await;
    assert!(page.starts_with("HTTP/1.0 200"), "{page}");
    assert!(page.contains("text/plain; version=0.0.4"), "{page}");
    assert_eq!(families(&page), ["shared_seconds", "page_text"], "{page}");

    let miss = get(addr, "/metrics/nope").await;
    assert!(miss.starts_with("HTTP/1.0 404"), "{miss}");
    assert!(
        miss.ends_with("try /metrics, /metrics/extra, /healthz, /readyz\n"),
        "{miss}"
    );

    stop.trigger();
    served.await.expect("served");
}
