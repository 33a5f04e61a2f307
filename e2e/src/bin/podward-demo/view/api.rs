//! The demo pod as the API server has it, printed as `kubectl describe pod` prints its
//! Conditions and Events (with the condition's reason and last transition, which `describe`
//! leaves to `kubectl get -o yaml`).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use podward_e2e::apiserver::MockApiServer;
use serde_json::Value;

use crate::term::{Style, printable};

/// Events shown in the block (the most recent).
const LAST_EVENTS: usize = 5;

/// A pod condition.
pub(crate) struct Condition {
    /// `type`.
    pub(crate) ty: String,
    /// `True`, `False` or `Unknown`.
    pub(crate) status: String,
    /// `reason`.
    pub(crate) reason: String,
    /// `message`.
    pub(crate) message: String,
    /// `lastTransitionTime`, as written.
    pub(crate) last_transition: String,
}

impl Condition {
    fn of(v: &Value) -> Condition {
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
        Condition {
            ty: s("type"),
            status: s("status"),
            reason: s("reason"),
            message: s("message"),
            last_transition: s("lastTransitionTime"),
        }
    }

    /// ` (reason: message)`, or "" when the condition has neither.
    pub(crate) fn reason_and_message(&self) -> String {
        match (self.reason.is_empty(), self.message.is_empty()) {
            (true, true) => String::new(),
            (false, true) => format!(" ({})", printable(&self.reason, 60)),
            (true, false) => format!(" ({})", printable(&self.message, 90)),
            (false, false) => format!(
                " ({}: {})",
                printable(&self.reason, 60),
                printable(&self.message, 90)
            ),
        }
    }
}

/// Condition `ty` of pod `uid`, if the API server has it.
pub(crate) fn condition(api: &MockApiServer, uid: &str, ty: &str) -> Option<Condition> {
    conditions(api, uid).into_iter().find(|c| c.ty == ty)
}

fn conditions(api: &MockApiServer, uid: &str) -> Vec<Condition> {
    api.pod(uid)
        .and_then(|p| {
            p["status"]["conditions"]
                .as_array()
                .map(|a| a.iter().map(Condition::of).collect())
        })
        .unwrap_or_default()
}

/// An `events.k8s.io/v1` event series about the pod.
pub(crate) struct Event {
    /// `metadata.name`.
    pub(crate) name: String,
    /// `Normal` or `Warning`.
    pub(crate) ty: String,
    /// `reason`.
    pub(crate) reason: String,
    /// `note`.
    pub(crate) note: String,
    /// `reportingController`.
    pub(crate) from: String,
    /// `series.count` (1 for a single event).
    pub(crate) count: u64,
    /// `eventTime`: the series' first occurrence.
    pub(crate) first: Option<SystemTime>,
    /// `series.lastObservedTime`, else `eventTime`.
    pub(crate) last: Option<SystemTime>,
}

fn time(v: &Value) -> Option<SystemTime> {
    v.as_str()
        .and_then(|s| humantime::parse_rfc3339_weak(s.trim_end_matches('Z')).ok())
}

/// The events about pod `uid`, oldest (by last occurrence) first.
pub(crate) fn events(api: &MockApiServer, uid: &str) -> Vec<Event> {
    let mut out: Vec<Event> = api.events().iter().filter_map(|e| event(e, uid)).collect();
    out.sort_by_key(|e| e.last);
    out
}

/// `e` as `kubectl describe` shows it, if it regards the pod `uid`: a core `v1` event (what the
/// prober writes, as kubelet does) or an `events.k8s.io/v1` one (the sentinel's).
fn event(e: &Value, uid: &str) -> Option<Event> {
    let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
    let name = e["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if e["involvedObject"]["uid"] == uid {
        let first = time(&e["firstTimestamp"]);
        return Some(Event {
            name,
            ty: s("type"),
            reason: s("reason"),
            note: s("message"),
            from: e["source"]["component"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            count: e["count"].as_u64().unwrap_or(1),
            first,
            last: time(&e["lastTimestamp"]).or(first),
        });
    }
    if e["regarding"]["uid"] != uid {
        return None;
    }
    let first = time(&e["eventTime"]);
    Some(Event {
        name,
        ty: s("type"),
        reason: s("reason"),
        note: s("note"),
        from: s("reportingController"),
        count: e["series"]["count"].as_u64().unwrap_or(1),
        first,
        last: time(&e["series"]["lastObservedTime"]).or(first),
    })
}

/// kubectl's short duration: `45s`, `2m10s`.
fn short(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        format!("{s}s")
    } else {
        format!("{}m{}s", s / 60, s % 60)
    }
}

fn age(t: Option<SystemTime>) -> String {
    t.and_then(|t| SystemTime::now().duration_since(t).ok())
        .map_or_else(|| "<unknown>".to_owned(), short)
}

/// The Conditions and Events sections of `kubectl describe pod`, for pod `uid`.
pub(crate) fn describe(b: &mut String, api: &MockApiServer, uid: &str, style: &Style) {
    let _ = writeln!(b, "  Conditions (API server, as kubectl shows them):");
    let _ = writeln!(
        b,
        "    {:<18}{:<8}{:<24}{:<17}MESSAGE",
        "TYPE", "STATUS", "REASON", "LAST TRANSITION"
    );
    for c in conditions(api, uid) {
        let status = style.verdict(c.status != "False", &format!("{:<8}", c.status));
        let since = time(&Value::String(c.last_transition.clone()));
        let _ = writeln!(
            b,
            "    {:<18}{status}{:<24}{:<17}{}",
            printable(&c.ty, 17),
            printable(&c.reason, 23),
            if c.last_transition.is_empty() {
                "-".to_owned()
            } else {
                format!("{} ago", age(since))
            },
            printable(&c.message, 60),
        );
    }
    let all = events(api, uid);
    let shown = all.len().min(LAST_EVENTS);
    let _ = writeln!(b, "  Events (API server, last {shown} of {}):", all.len());
    let _ = writeln!(
        b,
        "    {:<9}{:<11}{:<19}{:<16}Message",
        "Type", "Reason", "Age", "From"
    );
    let _ = writeln!(
        b,
        "    {:<9}{:<11}{:<19}{:<16}-------",
        "----", "------", "----", "----"
    );
    for e in all.iter().skip(all.len() - shown) {
        // As kubectl: `3s (x4 over 9s)` once an event repeats.
        let when = if e.count > 1 {
            let over = match (e.first, e.last) {
                (Some(f), Some(l)) => short(l.duration_since(f).unwrap_or_default()),
                _ => "?".to_owned(),
            };
            format!("{} (x{} over {over})", age(e.last), e.count)
        } else {
            age(e.last)
        };
        let ty = format!("{:<9}", printable(&e.ty, 8));
        let _ = writeln!(
            b,
            "    {}{:<11}{:<19}{:<16}{}",
            if e.ty == "Warning" {
                style.yellow(&ty)
            } else {
                ty
            },
            printable(&e.reason, 10),
            when,
            printable(&e.from, 15),
            printable(&e.note, 80),
        );
    }
}
