//! The chart's monitoring objects against the docs and PromQL itself:
//! - the ServiceMonitor scrapes the prober's probe families from `/metrics/probes` (kubelet's path
//!   for them), drops them from its `/metrics` scrape, and honours their `pod`/`namespace` labels;
//! - the PrometheusRule (off by default) holds exactly the alerts of docs/operations.md, "Alerts",
//!   with the same expressions, `for` and severities;
//! - every alert expression and every dashboard query parses as PromQL (`promql-parser`) and
//!   reads only metrics documented in docs/operations.md, "Metrics";
//! - the dashboard ConfigMap carries `dashboards/podward.json` unchanged.

use std::collections::{BTreeMap, BTreeSet};

use promql_parser::label::MatchOp;
use promql_parser::parser::{self, Expr};
use serde_json::{Value, json};

#[path = "support/chart.rs"]
mod support;
use support::{Render, Rendered, md_section, md_table, read};

fn all_on() -> Rendered {
    Render::defaults()
        .values("charts/tests/values-all-on.yaml")
        .run()
}

/// Metric names documented in docs/operations.md, "Metrics" (first column of its tables), plus
/// the series Prometheus derives from histograms and the standard families every daemon exports.
fn documented_metrics() -> BTreeSet<String> {
    let section = md_section(&read("docs/operations.md"), "## 6. Metrics");
    let mut names = BTreeSet::new();
    let mut rest = section.as_str();
    while let Some(start) = rest.find("| `") {
        rest = &rest[start + 1..];
        let line = rest.lines().next().unwrap_or_default();
        let first_cell = line.split('|').next().unwrap_or_default();
        for token in first_cell.split('`').skip(1).step_by(2) {
            let name = token.split('{').next().unwrap_or_default();
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                names.insert(name.to_owned());
            }
        }
    }
    let histograms: Vec<String> = names
        .iter()
        .filter(|n| n.ends_with("_seconds") && !n.ends_with("_timestamp_seconds"))
        .cloned()
        .collect();
    for h in histograms {
        for suffix in ["_bucket", "_sum", "_count"] {
            names.insert(format!("{h}{suffix}"));
        }
    }
    assert!(
        names.contains("podward_shim_requests_total")
            && names.contains("prober_probe_total")
            && names.contains("podward_housekeeper_blocked")
            && names.contains("podward_prober_build_info"),
        "the metric tables were not read: {names:?}"
    );
    names
}

/// Every metric a PromQL expression selects: (exact names, name regexes).
fn selected(expr: &Expr, names: &mut Vec<String>, regexes: &mut Vec<String>) {
    let mut vs = |v: &promql_parser::parser::VectorSelector| {
        if let Some(n) = &v.name {
            names.push(n.clone());
        }
        for m in v.matchers.matchers.iter().filter(|m| m.name == "__name__") {
            match &m.op {
                MatchOp::Equal => names.push(m.value.clone()),
                MatchOp::Re(_) => regexes.push(m.value.clone()),
                _ => {}
            }
        }
    };
    match expr {
        Expr::Aggregate(a) => {
            selected(&a.expr, names, regexes);
            if let Some(p) = &a.param {
                selected(p, names, regexes);
            }
        }
        Expr::Unary(u) => selected(&u.expr, names, regexes),
        Expr::Binary(b) => {
            selected(&b.lhs, names, regexes);
            selected(&b.rhs, names, regexes);
        }
        Expr::Paren(p) => selected(&p.expr, names, regexes),
        Expr::Subquery(s) => selected(&s.expr, names, regexes),
        Expr::VectorSelector(v) => vs(v),
        Expr::MatrixSelector(m) => vs(&m.vs),
        Expr::Call(c) => {
            for a in &c.args.args {
                selected(a, names, regexes);
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
}

/// Parses `query` and checks that it reads only documented metrics (and at least one).
fn check_query(what: &str, query: &str, documented: &BTreeSet<String>) {
    let expr = parser::parse(query).unwrap_or_else(|e| panic!("{what}: not PromQL: {e}\n{query}"));
    let (mut names, mut regexes) = (Vec::new(), Vec::new());
    selected(&expr, &mut names, &mut regexes);
    assert!(
        !names.is_empty() || !regexes.is_empty(),
        "{what}: selects no metric: {query}"
    );
    for n in names {
        assert!(
            n == "up" || n.starts_with("process_") || documented.contains(&n),
            "{what}: {n} is not documented in docs/operations.md, Metrics"
        );
    }
    for r in regexes {
        let re = regex_lite(&r);
        assert!(
            documented.iter().any(|d| re(d)),
            "{what}: __name__=~{r:?} matches no documented metric"
        );
    }
}

/// A matcher for the only regex shape the dashboard uses: `prefix_(a|b|c)_suffix`.
fn regex_lite(r: &str) -> impl Fn(&str) -> bool + '_ {
    move |name: &str| {
        let (Some(open), Some(close)) = (r.find('('), r.find(')')) else {
            return name == r;
        };
        let (prefix, alts, suffix) = (&r[..open], &r[open + 1..close], &r[close + 1..]);
        alts.split('|')
            .any(|a| name == format!("{prefix}{a}{suffix}"))
    }
}

/// The alerts of the rendered PrometheusRule: name -> (expr, for, severity).
fn rendered_alerts(rule: &Value) -> BTreeMap<String, (String, String, String)> {
    rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            (
                r["alert"].as_str().expect("alert").to_owned(),
                (
                    r["expr"].as_str().expect("expr").trim().to_owned(),
                    r["for"].as_str().unwrap_or("–").to_owned(),
                    r["labels"]["severity"]
                        .as_str()
                        .expect("severity")
                        .to_owned(),
                ),
            )
        })
        .collect()
}

#[test]
fn service_monitor_scrapes_the_probe_families_from_metrics_probes() {
    let r = all_on();
    // The DaemonSet's ServiceMonitor (the sentinel has its own).
    let sm = r
        .objects
        .iter()
        .find(|o| o["kind"] == "ServiceMonitor" && o["metadata"]["name"] == "podward")
        .expect("the DaemonSet's ServiceMonitor");
    let endpoints = sm["spec"]["endpoints"].as_array().expect("endpoints");
    let prober: Vec<&Value> = endpoints
        .iter()
        .filter(|e| e["port"] == "prober-admin")
        .collect();
    let paths: BTreeSet<&str> = prober.iter().filter_map(|e| e["path"].as_str()).collect();
    assert_eq!(
        paths,
        BTreeSet::from(["/metrics", "/metrics/probes"]),
        "the prober is scraped on both paths"
    );
    for e in &prober {
        assert_eq!(
            e["honorLabels"], true,
            "{}: the metrics' pod/namespace/container name the probed pod",
            e["path"]
        );
    }
    let metrics = prober
        .iter()
        .find(|e| e["path"] == "/metrics")
        .expect("/metrics");
    let drops: Vec<&Value> = metrics["metricRelabelings"]
        .as_array()
        .expect("metricRelabelings on /metrics")
        .iter()
        .filter(|m| m["action"] == "drop")
        .collect();
    assert!(
        drops
            .iter()
            .any(|d| d["sourceLabels"] == json!(["__name__"]) && d["regex"] == "prober_probe_.*"),
        "the probe families must be stored once, from /metrics/probes: {drops:?}"
    );
    let probes = prober
        .iter()
        .find(|e| e["path"] == "/metrics/probes")
        .expect("/metrics/probes");
    assert!(
        probes["metricRelabelings"].is_null(),
        "/metrics/probes keeps everything"
    );
    for e in endpoints {
        let targets: Vec<&str> = e["relabelings"]
            .as_array()
            .expect("relabelings")
            .iter()
            .filter_map(|r| r["targetLabel"].as_str())
            .collect();
        assert!(
            targets.contains(&"node") && targets.contains(&"metrics_path"),
            "{}{}: {targets:?}",
            e["port"],
            e["path"]
        );
    }
}

#[test]
fn prometheus_rule_holds_exactly_the_documented_alerts() {
    let defaults = Render::defaults().run();
    assert!(
        defaults.find("PrometheusRule").is_none(),
        "the PrometheusRule is opt-in"
    );
    assert!(
        defaults.find("ConfigMap").is_none(),
        "the dashboard is opt-in"
    );

    let r = all_on();
    let rule = r.get("PrometheusRule");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let rendered = rendered_alerts(rule);

    let section = md_section(&read("docs/operations.md"), "## 7. Alerts");
    let documented: BTreeMap<String, (String, String, String)> = md_table(&section)
        .into_iter()
        .map(|row| {
            let cell = |i: usize| row[i].trim_matches('`').to_owned();
            (cell(0), (cell(1), cell(2), cell(3)))
        })
        .collect();
    assert!(documented.len() >= 8, "docs table not read: {documented:?}");
    assert_eq!(
        rendered.keys().collect::<Vec<_>>(),
        documented.keys().collect::<Vec<_>>(),
        "alert names: chart vs docs"
    );
    for (name, want) in &documented {
        assert_eq!(&rendered[name], want, "{name}: (expr, for, severity)");
    }
    let metrics = documented_metrics();
    for (name, (expr, _, _)) in &rendered {
        check_query(name, expr, &metrics);
    }
    // Thresholds are values.
    let tuned = Render::defaults()
        .set(
            json!({"prometheusRule": {"enabled": true, "proberKillsPer10m": 7,
                     "housekeeperStaleSeconds": 900}}),
        )
        .run();
    let tuned = rendered_alerts(tuned.get("PrometheusRule"));
    assert!(tuned["PodwardProberKills"].0.ends_with("> 7"));
    assert!(tuned["PodwardHousekeeperStale"].0.ends_with("> 900"));
}

#[test]
fn dashboard_ships_unchanged_and_queries_documented_metrics() {
    let r = all_on();
    let cm = r.get("ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped = read("charts/podward/dashboards/podward.json");
    let carried = cm["data"]["podward.json"].as_str().expect("podward.json");
    assert_eq!(carried.trim_end(), shipped.trim_end());
    let dash: Value = serde_json::from_str(&shipped).expect("dashboard JSON");
    let vars: BTreeSet<&str> = dash["templating"]["list"]
        .as_array()
        .expect("templating")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    let metrics = documented_metrics();
    let mut queries = 0;
    for panel in dash["panels"].as_array().expect("panels") {
        for t in panel["targets"].as_array().cloned().unwrap_or_default() {
            let expr = t["expr"].as_str().expect("expr");
            // Grafana's variables, as Grafana substitutes them.
            for var in ["node", "job"] {
                assert!(
                    !expr.contains(&format!("${var}")) || vars.contains(var),
                    "{expr}: ${var} is not a dashboard variable"
                );
            }
            let q = expr
                .replace("$node", ".*")
                .replace("$job", ".*")
                .replace("$__rate_interval", "1m");
            check_query(panel["title"].as_str().unwrap_or("panel"), &q, &metrics);
            queries += 1;
        }
    }
    assert!(queries >= 20, "only {queries} queries");
}

#[test]
fn the_query_check_rejects_bad_promql_and_undocumented_metrics() {
    // The checks above would pass vacuously if parsing accepted anything or names went unread.
    let metrics = documented_metrics();
    assert!(parser::parse("rate(podward_shim_requests_total[5m]").is_err());
    let caught = std::panic::catch_unwind(|| {
        check_query("t", "podward_not_a_metric > 0", &metrics);
    });
    assert!(caught.is_err(), "an undocumented metric must fail");
    check_query("t", "podward_shim_upstream_connected == 0", &metrics);
}

/// The names of the alerts `values` renders (with the PrometheusRule on).
fn alert_names(values: Value) -> BTreeSet<String> {
    let mut v = json!({"prometheusRule": {"enabled": true}});
    if let (Some(d), Some(s)) = (v.as_object_mut(), values.as_object()) {
        for (k, x) in s {
            d.insert(k.clone(), x.clone());
        }
    }
    let r = Render::defaults().set(v).run();
    rendered_alerts(r.get("PrometheusRule"))
        .into_keys()
        .collect()
}

const SENTINEL_ALERTS: [&str; 3] = [
    "PodwardNodeLeaseExpired",
    "PodwardSentinelMarkingHeld",
    "PodwardSentinelNoLeader",
];

#[test]
fn alerts_are_rendered_only_where_what_they_watch_is_deployed() {
    // Defaults: no ServiceMonitor, so no `up` to watch; the lease and the sentinel are on.
    let defaults = alert_names(json!({}));
    assert!(!defaults.contains("PodwardTargetDown"), "{defaults:?}");
    for a in SENTINEL_ALERTS
        .iter()
        .chain(&["PodwardNodeLeaseNotRenewing", "PodwardProberBlind"])
    {
        assert!(defaults.contains(*a), "{a} missing: {defaults:?}");
    }
    let r = Render::defaults()
        .set(json!({"prometheusRule": {"enabled": true}}))
        .run();
    assert_eq!(
        rendered_alerts(r.get("PrometheusRule"))["PodwardSentinelNoLeader"].0,
        "sum(podward_sentinel_leader) != 1",
        "without the chart's ServiceMonitors, an unscraped sentinel must not fire it"
    );

    // sentinel.enabled with the prober's API side off: the sentinel is not deployed.
    let no_api = Render::defaults()
        .set(json!({"prometheusRule": {"enabled": true},
                    "prober": {"kubernetesApi": {"enabled": false}}}))
        .run();
    assert!(
        !no_api.objects.iter().any(|o| o["kind"] == "Deployment"),
        "no sentinel without the API side"
    );
    let names: BTreeSet<String> = rendered_alerts(no_api.get("PrometheusRule"))
        .into_keys()
        .collect();
    for a in SENTINEL_ALERTS
        .iter()
        .chain(&["PodwardNodeLeaseNotRenewing"])
    {
        assert!(!names.contains(*a), "{a} rendered without what it watches");
    }

    let no_sentinel = alert_names(json!({"sentinel": {"enabled": false}}));
    for a in SENTINEL_ALERTS {
        assert!(
            !no_sentinel.contains(a),
            "{a} rendered without the sentinel"
        );
    }
    assert!(no_sentinel.contains("PodwardNodeLeaseNotRenewing"));

    let no_lease = alert_names(json!({"nodeLease": {"durationSeconds": 0}}));
    assert!(!no_lease.contains("PodwardNodeLeaseNotRenewing"));

    let scraped = alert_names(json!({"serviceMonitor": {"enabled": true}}));
    assert!(scraped.contains("PodwardTargetDown"));
}

/// GitHub's anchor of a Markdown heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_has_a_runbook_url_into_its_heading_of_the_runbooks() {
    let docs = read("docs/operations.md");
    let runbooks = md_section(&docs, "### 7.1 Runbooks");
    let anchors: BTreeSet<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("#### "))
        .map(slug)
        .collect();
    let r = all_on();
    let rules: Vec<Value> = r.get("PrometheusRule")["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .collect();
    assert!(rules.len() >= 14, "{} rules", rules.len());
    for rule in &rules {
        let alert = rule["alert"].as_str().expect("alert");
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{alert}: no runbook_url"));
        let anchor = url
            .strip_prefix("docs/operations.md#")
            .unwrap_or_else(|| panic!("{alert}: {url} is not into docs/operations.md"));
        assert!(
            anchors.contains(anchor),
            "{alert}: #{anchor} is no heading of docs/operations.md, Runbooks: {anchors:?}"
        );
        assert_eq!(anchor, slug(alert), "{alert}: its own heading");
    }
    // Where the docs are served is a value.
    let served = Render::defaults()
        .set(json!({"prometheusRule": {"enabled": true,
                     "runbookBaseUrl": "https://git.example/podward/blob/v1/docs/operations.md"}}))
        .run();
    let rule = &served.get("PrometheusRule")["spec"]["groups"][0]["rules"][0];
    assert!(
        rule["annotations"]["runbook_url"]
            .as_str()
            .expect("runbook_url")
            .starts_with("https://git.example/podward/blob/v1/docs/operations.md#podward"),
        "{rule}"
    );
}
