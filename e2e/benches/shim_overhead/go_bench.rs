//! The mix as a kubelet makes it: kubelet's client stack (gRPC-Go), one long-lived connection per
//! path, dialled once and warmed up before anything is timed, and at concurrency 16 sixteen
//! goroutines sharing that one connection (kubelet's pod workers share its one runtime
//! connection). One gRPC-Go process runs every path side by side (`e2e/clients/go/main.go`'s
//! `bench` mode): [`ROUNDS`] interleaved rounds of [`CALLS`] sequential calls, then [`REPS`]
//! interleaved runs of [`SECS`] s at [`CONCURRENCY`]; which path goes first rotates.
//!
//! Unlike the tonic rounds, no dial, connection set-up or first-call work lands in the figures,
//! and the c=16 figure is throughput over a fixed time on open connections, not a fixed number
//! of mixes whose wall time includes sixteen dials.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::figures::Path3;

/// Interleaved rounds at concurrency 1.
pub(crate) const ROUNDS: usize = 8;
/// Sequential calls per path per round (100 mixes).
pub(crate) const CALLS: usize = 500;
/// Interleaved runs at [`CONCURRENCY`].
pub(crate) const REPS: usize = 3;
/// Seconds per path per run at [`CONCURRENCY`].
pub(crate) const SECS: u64 = 3;
/// Goroutines sharing each path's one connection.
pub(crate) const CONCURRENCY: usize = 16;

/// Runs the gRPC-Go client `bin` on `paths` (direct, socat, the shim, then any extra), `pids`
/// the relay serving each (0: none), the mix on sandbox `sid` and container `cid`, and prints
/// the figures of both phases.
pub(crate) async fn run(bin: &Path, paths: Vec<Path3>, pids: &[u32], sid: &str, cid: &str) {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg("bench").args([sid, cid]);
    cmd.args([ROUNDS, CALLS, REPS, SECS as usize, CONCURRENCY].map(|n| n.to_string()));
    // Paths go by index: their names hold spaces.
    for (i, (p, pid)) in paths.iter().zip(pids).enumerate() {
        cmd.arg(format!("{i}={}={pid}", p.path.display()));
    }
    println!(
        "grpc-go, one process, one connection per path (warmed up): {ROUNDS} interleaved rounds × {CALLS} calls at c=1, \
         {REPS} × {SECS} s at c={CONCURRENCY} (goroutines sharing the connection)"
    );
    let out = cmd.output().await.expect("run the gRPC-Go client");
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.lines().any(|l| l == "DONE") {
        println!(
            "grpc-go bench FAILED ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let mut phases: [Vec<Path3>; 2] = [
        paths.iter().map(|p| Path3::new(&p.name, &p.path)).collect(),
        paths.iter().map(|p| Path3::new(&p.name, &p.path)).collect(),
    ];
    let mut cpu: [Vec<(String, f64)>; 2] = [Vec::new(), Vec::new()];
    let phase = |tag: &str| match tag {
        "c1" => Some(0),
        "c16" => Some(1),
        _ => None,
    };
    for line in text.lines() {
        let f: Vec<&str> = line.splitn(5, ' ').collect();
        let path = |i: usize| f.get(i).and_then(|v| v.parse::<usize>().ok());
        match f[..] {
            ["LAT", ph, _, call, list] => {
                let (Some(ph), Some(i), Ok(call)) = (phase(ph), path(2), call.parse::<usize>())
                else {
                    continue;
                };
                let Some(p) = phases[ph].get_mut(i) else {
                    continue;
                };
                let lat: Vec<Duration> = list
                    .split(',')
                    .filter_map(|ns| ns.parse().ok())
                    .map(Duration::from_nanos)
                    .collect();
                p.lat.extend(&lat);
                if let Some(by) = p.by_call.get_mut(call) {
                    by.extend(lat);
                }
            }
            ["RUN", ph, _, n, rest] => {
                let (Some(ph), Some(i)) = (phase(ph), path(2)) else {
                    continue;
                };
                let mut nums = rest.split(' ').filter_map(|v| v.parse::<u64>().ok());
                let (Some(wall), Some(cpu_ns)) = (nums.next(), nums.next()) else {
                    continue;
                };
                let Some(p) = phases[ph].get_mut(i) else {
                    continue;
                };
                p.wall = Duration::from_nanos(wall);
                if pids.get(i).is_some_and(|&pid| pid != 0) {
                    let calls = n.parse::<f64>().unwrap_or(0.0).max(1.0);
                    cpu[ph].push((p.name.clone(), cpu_ns as f64 / 1e3 / calls));
                }
            }
            ["FAIL", ..] => {
                eprintln!("bench call failed (grpc-go): {line}");
                // A failure of any phase fails the path in both: a floor with failures is no
                // floor.
                if let Some(i) = f.get(1).and_then(|v| v.parse::<usize>().ok()) {
                    for ph in &phases {
                        if let Some(p) = ph.get(i) {
                            p.failures.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    let [c1, c16] = &mut phases;
    crate::report("concurrency  1 grpc-go", c1, &cpu[0]);
    crate::report(&format!("concurrency {CONCURRENCY} grpc-go"), c16, &cpu[1]);
}
