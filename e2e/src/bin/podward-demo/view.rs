//! What the demo shows: [`Observer::changes`], one line per thing that just happened (a kill
//! with its preStop hook, a restart, the gate condition moving, a new event, a housekeeper plan
//! or action), and [`Observer::block`], the periodic status block — the prober's view of the
//! pod, the pod as `kubectl describe pod` shows it from the API server, and the housekeeper's
//! last pass.

mod api;
mod housekeeper;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use podward_api::housekeeper::v1::housekeeper_client::HousekeeperClient;
use podward_api::prober::v1::prober_client::ProberClient;
use podward_api::prober::v1::{ContainerStatus, ProbeResult, ProbeType, StatusRequest};
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::scenario::{DemoPod, EXEC_PROBED, GATE, Orphan, cgroup_of};
use crate::stack::{NODE_NAME, Stack};
use crate::term::{Style, printable};

/// Widest probe output or event note shown.
const TEXT: usize = 90;

/// Reads the daemons and the API server, and remembers what it already reported.
pub(crate) struct Observer<'a> {
    stack: &'a Stack,
    demo: &'a DemoPod,
    orphan: &'a Orphan,
    style: Style,
    prober: ProberClient<Channel>,
    hk: HousekeeperClient<Channel>,
    /// When the pods started, on both clocks.
    pub(crate) started: Instant,
    started_wall: SystemTime,
    gate: Option<String>,
    kills: BTreeMap<String, i64>,
    restarts: BTreeMap<String, u32>,
    runners: BTreeSet<String>,
    events: BTreeSet<String>,
    hk_pass: u64,
    hk_seen: BTreeSet<String>,
}

impl<'a> Observer<'a> {
    /// An observer of `demo` and `orphan` on `stack`; its clock starts now.
    pub(crate) fn new(
        stack: &'a Stack,
        demo: &'a DemoPod,
        orphan: &'a Orphan,
        style: Style,
    ) -> Self {
        Observer {
            prober: ProberClient::new(podward_api::socket::channel(&stack.paths.prober_sock)),
            hk: HousekeeperClient::new(podward_api::socket::channel(&stack.paths.hk_sock)),
            stack,
            demo,
            orphan,
            style,
            started: Instant::now(),
            started_wall: SystemTime::now(),
            gate: None,
            kills: BTreeMap::new(),
            restarts: BTreeMap::new(),
            runners: BTreeSet::new(),
            events: BTreeSet::new(),
            hk_pass: 0,
            hk_seen: BTreeSet::new(),
        }
    }

    /// `+12.3s`: the time since the pods started.
    fn stamp(&self) -> String {
        format!("{:>+7.1}s", self.started.elapsed().as_secs_f64())
    }

    /// A wall-clock time as `+12.3s` on the demo's clock.
    fn stamp_of(&self, t: SystemTime) -> String {
        let secs = match t.duration_since(self.started_wall) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        format!("{secs:>+7.1}s")
    }

    async fn containers(&mut self) -> Vec<ContainerStatus> {
        let req = StatusRequest {
            pod_uid: self.demo.pod.uid().to_owned(),
        };
        match self.prober.status(req).await {
            Ok(r) => r
                .into_inner()
                .pods
                .into_iter()
                .flat_map(|p| p.containers)
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// What happened since the last call, one line each.
    pub(crate) async fn changes(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for c in self.containers().await {
            self.container_changes(&c, &mut out);
        }
        for name in ["web", "flaky"] {
            let n = self.demo.pod.restart_count(name);
            if n > *self.restarts.get(name).unwrap_or(&0) {
                self.restarts.insert(name.to_owned(), n);
                out.push(format!(
                    "{}  {name}: restarted by the kubelet-like driver (restartCount {n})",
                    self.stamp()
                ));
            }
        }
        let uid = self.demo.pod.uid().to_owned();
        if let Some(cond) = api::condition(&self.stack.api, &uid, GATE)
            && self.gate.as_deref() != Some(cond.status.as_str())
        {
            self.gate = Some(cond.status.clone());
            let status = self.style.verdict(cond.status == "True", &cond.status);
            out.push(format!(
                "{}  API server: pod default/demo condition {GATE}={status}{}",
                self.stamp(),
                cond.reason_and_message()
            ));
        }
        for ev in api::events(&self.stack.api, &uid) {
            if self.events.insert(ev.name.clone()) {
                out.push(format!(
                    "{}  API server: event {} {} from {}: {}",
                    self.stamp(),
                    ev.ty,
                    self.style.bold(&ev.reason),
                    ev.from,
                    printable(&ev.note, TEXT)
                ));
            }
        }
        self.housekeeper_changes(&mut out).await;
        out
    }

    fn container_changes(&mut self, c: &ContainerStatus, out: &mut Vec<String>) {
        // The CRI runner reports no choice of its own: a container whose exec probes have run
        // without one ran them through CRI `ExecSync` (the shim, then containerd).
        let runner = match c.exec_runner.as_str() {
            "" if EXEC_PROBED.contains(&c.name.as_str())
                && c.probes.iter().any(|p| p.probes_run > 0) =>
            {
                "cri"
            }
            r => r,
        };
        if !runner.is_empty() && self.runners.insert(c.name.clone()) {
            let why = if c.exec_runner_reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", printable(&c.exec_runner_reason, TEXT))
            };
            out.push(format!(
                "{}  {}: exec probes run {}{why}: what the prober's default --exec-mode chose",
                self.stamp(),
                c.name,
                self.style.bold(runner),
            ));
        }
        let Some(kill) = &c.last_kill else { return };
        if self.kills.get(&c.name) == Some(&kill.at_ns) {
            return;
        }
        self.kills.insert(c.name.clone(), kill.at_ns);
        let at = podward_api::time::from_ns(kill.at_ns);
        let probe = ProbeType::try_from(kill.probe_type).map_or("a", |t| match t {
            ProbeType::Liveness => "liveness",
            ProbeType::Startup => "startup",
            _ => "a",
        });
        // The hook touched its file on the host; a touch within the grace before the stop is
        // this kill's hook.
        let hook = std::fs::metadata(&self.demo.hook_file)
            .and_then(|m| m.modified())
            .ok()
            .filter(|t| {
                at.duration_since(*t)
                    .is_ok_and(|d| d < Duration::from_secs(10))
            });
        let hook = match hook {
            Some(t) => format!(
                "its preStop hook ran first, at {}, ",
                self.stamp_of(t).trim()
            ),
            None => String::new(),
        };
        let result = if kill.error.is_empty() {
            String::new()
        } else {
            format!(" — FAILED: {}", printable(&kill.error, TEXT))
        };
        out.push(format!(
            "{}  {}: {} by podward-prober, {probe} probe failed ({}); {hook}then StopContainer with {}s grace{result}",
            self.stamp_of(at),
            c.name,
            self.style.red("killed"),
            printable(&kill.output, 40),
            kill.grace_period_seconds,
        ));
    }

    /// The pod's block, then the housekeeper's.
    pub(crate) async fn block(&mut self) -> String {
        let mut b = String::new();
        let title = format!(
            "── {} ── pod default/demo on {NODE_NAME} ",
            self.stamp().trim()
        );
        let _ = writeln!(b, "{}", self.style.bold(&format!("{title:─<100}")));
        let _ = writeln!(b, "  Containers (podward-prober Status):");
        let _ = writeln!(
            b,
            "    {:<7}{:<7}{:<6}{:<10}{:<7}{:<10}{:<11}{:<8}LAST PROBE OUTPUT",
            "NAME", "READY", "LIVE", "RESTARTS", "KILLS", "LIVENESS", "READINESS", "EXEC"
        );
        for c in self.containers().await {
            let last = |ty: ProbeType| {
                c.probes.iter().find(|p| p.r#type == ty as i32).map_or(
                    (String::from("-"), String::new()),
                    |p| {
                        let r = ProbeResult::try_from(p.result).unwrap_or(ProbeResult::Unknown);
                        let word = match r {
                            ProbeResult::Success => "Success",
                            ProbeResult::Failure => "Failure",
                            ProbeResult::Unknown => "Unknown",
                        };
                        (word.to_owned(), printable(&p.last_output, 40))
                    },
                )
            };
            let (live, live_out) = last(ProbeType::Liveness);
            let (ready, ready_out) = last(ProbeType::Readiness);
            let output = if ready == "Failure" {
                ready_out
            } else {
                live_out
            };
            let pad = |s: &str, w: usize| format!("{s:<w$}");
            let _ = writeln!(
                b,
                "    {:<7}{}{}{:<10}{:<7}{}{}{:<8}{output}",
                c.name,
                self.style.verdict(c.ready, &pad(&c.ready.to_string(), 7)),
                self.style.verdict(c.live, &pad(&c.live.to_string(), 6)),
                self.demo.pod.restart_count(&c.name),
                c.kills,
                self.style.verdict(live != "Failure", &pad(&live, 10)),
                self.style.verdict(ready != "Failure", &pad(&ready, 11)),
                if c.exec_runner.is_empty() {
                    "-"
                } else {
                    &c.exec_runner
                },
            );
        }
        api::describe(&mut b, &self.stack.api, self.demo.pod.uid(), &self.style);
        housekeeper::describe(&mut b, &mut self.hk, self.orphan, &self.style).await;
        b
    }

    async fn housekeeper_changes(&mut self, out: &mut Vec<String>) {
        let Some(pass) = housekeeper::last_pass(&mut self.hk).await else {
            return;
        };
        if pass.pass == self.hk_pass {
            return;
        }
        self.hk_pass = pass.pass;
        for line in housekeeper::plan_lines(&pass, self.orphan, &self.style) {
            if self.hk_seen.insert(line.clone()) {
                out.push(format!(
                    "{}  housekeeper pass {}: {line}",
                    self.stamp(),
                    pass.pass
                ));
            }
        }
    }

    /// What became of the orphan and of the live pod, checked on disk.
    pub(crate) fn outcome(&self, act: bool) -> String {
        let gone: Vec<&str> = self
            .orphan
            .remains()
            .iter()
            .filter(|(_, there)| !there)
            .map(|(what, _)| *what)
            .collect();
        let spec = self.demo.pod.spec();
        let live = [
            ("cgroup", cgroup_of(self.stack, spec).exists()),
            (
                "pod dir",
                self.stack
                    .paths
                    .kubelet_root
                    .join("pods")
                    .join(&spec.uid)
                    .exists(),
            ),
            (
                "log dir",
                self.stack
                    .paths
                    .log_root
                    .join(format!("default_demo_{}", spec.uid))
                    .exists(),
            ),
        ];
        let live_ok = live.iter().all(|(_, there)| *there);
        let live_line = if live_ok {
            self.style.green(
                "live pod default/demo untouched: its cgroup, pod dir and log dir are in place",
            )
        } else {
            let missing: Vec<&str> = live.iter().filter(|l| !l.1).map(|l| l.0).collect();
            self.style.red(&format!(
                "live pod default/demo damaged: missing {}",
                missing.join(", ")
            ))
        };
        let orphan_line = match (act, gone.len()) {
            (true, 3) => self.style.green(
                "orphan default/old-job cleaned by the housekeeper: its cgroup, pod dir and log dir are gone",
            ),
            (true, _) => self.style.yellow(&format!(
                "orphan default/old-job not fully cleaned yet (gone: {}); a longer run lets the housekeeper finish",
                if gone.is_empty() { "nothing".to_owned() } else { gone.join(", ") }
            )),
            (false, 0) => "dry run: the orphan's cgroup, pod dir and log dir are all still there \
                           (the housekeeper only planned; run the demo with --act to let it act)"
                .to_owned(),
            (false, _) => self.style.red(&format!(
                "dry run, yet the orphan lost: {}",
                gone.join(", ")
            )),
        };
        format!(
            "{}\n   {orphan_line}\n   {live_line}",
            self.style.bold("== outcome")
        )
    }
}
