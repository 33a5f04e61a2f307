//! Upstream "Probing container" liveness scenarios (#3–#9, #11–#13 of upstream's
//! `test/e2e/common/node/container_probe.go`, numbered in `docs/prober.md`) on a real
//! containerd, shim and prober, with upstream's probe
//! parameters. They run concurrently on one node (distinct ports); observation windows are
//! shortened from 4 min to 60 s, which still covers the initial delay, the failure point and
//! several periods. #5 also checks what an operator sees of its kill: the metrics (on
//! `/metrics` and kubelet's `/metrics/probes`), `podward-prober status`, and that the pod's
//! series, kills included, go when the pod is deleted.

#[path = "support/prober.rs"]
mod support;

use std::time::Duration;

use podward_api::test_util::eventually;
use podward_e2e::free_port;
use serde_json::json;
use support::*;

const NEVER: Duration = Duration::from_secs(60);
const ONCE: Duration = Duration::from_secs(120);

fn http_live(path: &str, port: u16, delay: i32, ft: i32) -> serde_json::Value {
    json!({"livenessProbe": {"httpGet": {"path": path, "port": port}, "initialDelaySeconds": delay, "failureThreshold": ft}})
}

fn exec_live(cmd: &[&str], delay: i32, timeout: i32) -> serde_json::Value {
    json!({"livenessProbe": {"exec": {"command": cmd}, "initialDelaySeconds": delay, "timeoutSeconds": timeout, "failureThreshold": 1}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_liveness_scenarios() {
    let env = Env::start().await;
    let e = &env;
    let health = "echo ok >/tmp/health; sleep 10; rm -rf /tmp/health";
    all(vec![
        ("#3 exec cat /tmp/health restarts once", Box::pin(async move {
            let pod = e.run("exec-restart", &script(health), exec_live(&["cat", "/tmp/health"], 15, 5)).await;
            restarts_once(&pod, ONCE).await
        })),
        ("#4 exec cat /tmp/health never restarts", Box::pin(async move {
            let pod = e.run("exec-never", &script("echo ok >/tmp/health"), exec_live(&["cat", "/tmp/health"], 15, 5)).await;
            restarts_stay(&pod, 0, NEVER).await
        })),
        ("#5 http /healthz restarts once; /metrics/probes, status, series go with the pod", Box::pin(async move {
            let port = free_port();
            let pod = e.run("http-restart", &http_server(port, Some(10)), http_live("/healthz", port, 15, 1)).await;
            restarts_once(&pod, ONCE).await?;
            let c = e.container(pod.uid(), "app").await.ok_or("no status")?;
            let kill = c.last_kill.ok_or("no kill in Status")?;
            (kill.output.contains("statuscode: 404") && c.kills == 1)
                .then_some(())
                .ok_or_else(|| format!("kill record: {kill:?}, kills {}", c.kills))?;
            // The same story in kubelet's metric names, as a scrape shows it.
            let text = scrape(e.prober_admin).await?;
            let pod_label = "pod=\"http-restart\"";
            let failed = sample(&text, &["prober_probe_total{", pod_label, "probe_type=\"Liveness\"", "result=\"failed\""]);
            let kills = sample(&text, &["podward_prober_kills_total{", pod_label]);
            (failed >= Some(1.0) && kills >= Some(1.0))
                .then_some(())
                .ok_or_else(|| format!("metrics: failed {failed:?} kills {kills:?}"))?;
            // kubelet's path for the probe families serves what kubelet serves there and nothing
            // of podward's own. The duration family is there only while some pod on the node has
            // had a successful probe (kubelet observes durations for successes alone), which
            // depends on what the other scenarios are doing at this moment; this pod has only ever
            // failed, so it must have no duration series.
            let probes = scrape_path(e.prober_admin, "/metrics/probes").await?;
            let fams = families(&probes);
            let kubelets = ["prober_probe_duration_seconds", "prober_probe_total", "process_start_time_seconds"];
            let failed = sample(&probes, &["prober_probe_total{", pod_label, "result=\"failed\""]);
            let durations = sample(&probes, &["prober_probe_duration_seconds_count{", pod_label]);
            (fams.iter().all(|f| kubelets.contains(&f.as_str()))
                && kubelets[1..].iter().all(|k| fams.iter().any(|f| f == k))
                && failed >= Some(1.0)
                && durations.is_none())
            .then_some(())
            .ok_or_else(|| format!("/metrics/probes: families {fams:?}, failed {failed:?}, durations {durations:?}:\n{probes}"))?;
            // What an operator types at 3 a.m. (the liveness probe may kill the next instance
            // meanwhile: at least one kill).
            let run = e.status_cli(&["--pod", "default/http-restart"]).await?;
            let table = run.stdout;
            let probe_row = table.lines().find(|l| l.starts_with("default/http-restart") && l.contains("Liveness"));
            let kill_row = table.lines().find(|l| l.starts_with("default/http-restart") && l.contains("Liveness ") && l.contains(" ago") && l.contains("stopped"));
            (run.ok && table.starts_with("1 pod, 1 container, 1 probe: ") && probe_row.is_some_and(|r| r.contains(" app ")) && kill_row.is_some_and(|r| r.contains("statuscode: 404")))
                .then_some(())
                .ok_or_else(|| format!("status table:\n{table}{}", run.stderr))?;
            let run = e.status_cli(&["--pod", "default/http-restart", "--json"]).await?;
            let v: serde_json::Value = serde_json::from_str(&run.stdout).map_err(|err| format!("status --json: {err}: {}{}", run.stdout, run.stderr))?;
            let c = &v["pods"][0]["containers"][0];
            (c["name"] == "app" && c["kills"].as_u64() >= Some(1) && c["last_kill"]["probe_type"] == "LIVENESS" && c["probes"][0]["type"] == "LIVENESS")
                .then_some(())
                .ok_or_else(|| format!("status --json: {v:#}"))?;
            // The pod goes: so do its series, kills included, and `status` no longer finds it.
            pod.delete().await.map_err(|err| err.to_string())?;
            let admin = e.prober_admin;
            eventually("the deleted pod's series to go", Duration::from_secs(30), async || {
                let text = scrape(admin).await.unwrap_or_default();
                text.contains("podward_prober_workers")
                    && !text.lines().any(|l| l.contains(pod_label) && (l.starts_with("podward_prober_kills_total{") || l.starts_with("prober_probe_")))
            })
            .await;
            let run = e.status_cli(&["--pod", "default/http-restart"]).await?;
            (!run.ok && run.stderr.contains("pod default/http-restart is not probed here"))
                .then_some(())
                .ok_or_else(|| format!("status of a deleted pod: {}{}", run.stdout, run.stderr))
        })),
        ("#6 tcp on an open port never restarts", Box::pin(async move {
            let port = free_port();
            let probe = json!({"livenessProbe": {"tcpSocket": {"port": port}, "initialDelaySeconds": 15, "failureThreshold": 1}});
            let pod = e.run("tcp-never", &http_server(port, Some(10)), probe).await;
            wait_listening(port, Duration::from_secs(10)).await?;
            restarts_stay(&pod, 0, NEVER).await
        })),
        ("#7 restart count increases monotonically over 5 restarts", Box::pin(async move {
            let port = free_port();
            let pod = e.run("monotonic", &http_server(port, Some(10)), http_live("/healthz", port, 5, 1)).await;
            pod.wait_restart_count("app", 5, Duration::from_secs(300)).await.map_err(|e| e.to_string())?;
            let seen = pod.restart_counts_seen("app");
            seen.windows(2).all(|w| w[1] >= w[0]).then_some(()).ok_or(format!("not monotonic: {seen:?}"))
        })),
        ("#8 http / on a healthy server never restarts", Box::pin(async move {
            let port = free_port();
            let probe = json!({"livenessProbe": {"httpGet": {"path": "/", "port": port}, "initialDelaySeconds": 15, "timeoutSeconds": 5, "failureThreshold": 5}});
            let pod = e.run("http-never", &http_server(port, None), probe).await;
            restarts_stay(&pod, 0, NEVER).await?;
            let text = scrape(e.prober_admin).await?;
            let pod_label = "pod=\"http-never\"";
            let ok = sample(&text, &["prober_probe_total{", pod_label, "result=\"successful\""]);
            let took = sample(&text, &["prober_probe_duration_seconds_count{", pod_label, "probe_type=\"Liveness\""]);
            let failed = sample(&text, &["prober_probe_total{", pod_label, "result=\"failed\""]);
            (ok >= Some(1.0) && took >= Some(1.0) && failed.is_none())
                .then_some(())
                .ok_or_else(|| format!("metrics: successful {ok:?} durations {took:?} failed {failed:?}"))
        })),
        ("#9 exec timeout restarts", Box::pin(async move {
            let pod = e.run("exec-timeout", &script("true"), exec_live(&["/bin/sh", "-c", "sleep 10"], 15, 1)).await;
            restarts_once(&pod, ONCE).await?;
            let c = e.container(pod.uid(), "app").await.ok_or("no status")?;
            let out = c.last_kill.map(|k| k.output).unwrap_or_default();
            out.contains("timed out").then_some(()).ok_or(format!("kill output {out:?}"))
        })),
        ("#11 failing exec longer than the timeout restarts", Box::pin(async move {
            let pod = e.run("exec-slow-fail", &script("true"), exec_live(&["/bin/sh", "-c", "sleep 10 & exit 1"], 15, 1)).await;
            restarts_once(&pod, ONCE).await
        })),
        ("#12 local redirect is followed and restarts once", Box::pin(async move {
            let port = free_port();
            let pod = e.run("redirect-local", &http_server(port, Some(10)), http_live("/cgi-bin/redirect?loc=/healthz", port, 15, 1)).await;
            restarts_once(&pod, ONCE).await
        })),
        ("#13 non-local redirect is a warning, never a restart", Box::pin(async move {
            let port = free_port();
            let mut probe = http_live("/cgi-bin/redirect?loc=http://0.0.0.0/", port, 15, 1);
            // Upstream keeps the 1 s default; here the redirect is a CGI fork on two cores shared
            // with every other test, and one CI run saw it take longer: a timeout with a failure
            // threshold of 1 restarts the container for a reason that says nothing of redirects.
            probe["livenessProbe"]["timeoutSeconds"] = json!(5);
            let pod = e.run("redirect-remote", &http_server(port, Some(10)), probe).await;
            wait_listening(port, Duration::from_secs(10)).await?;
            restarts_stay(&pod, 0, NEVER).await?;
            let c = e.container(pod.uid(), "app").await.ok_or("no status")?;
            let out = c.probes.first().map(|p| p.last_output.clone()).unwrap_or_default();
            out.starts_with("Probe terminated redirects").then_some(()).ok_or(format!("last output {out:?}"))
        })),
    ])
    .await;
}
