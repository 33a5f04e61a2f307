//! What the shim costs on the CRI path, on the real containerd, against the floor of any relay:
//!
//! - the call mix kubelet makes most (Version, ListPodSandbox, ListContainers with 100
//!   containers, ContainerStatus, PodSandboxStatus) at concurrency 1 and 16, direct, through a
//!   `socat` byte relay (Debian's socat, `UNIX-LISTEN:…,fork UNIX-CONNECT:…`) and through the
//!   shim, interleaved round by round in one run: added p50/p99 latency, throughput ratios;
//! - a ~4 MiB ListContainers answer: added time;
//! - the shim's RSS with 1,100 containers indexed, and its CPU while idle for 10 s.
//!
//! A path with a failed call prints FAILED instead of figures: a floor with failures is no
//! floor. The shim runs as its own process, the shipped `podward-shim` of this bench's profile
//! (built when stale), so its RSS, file-backed pages included, and its CPU are the daemon's
//! alone. Shims with settings the daemon has no flag for (below) are this bench binary
//! re-executed with `--as-shim`: the same library in a larger binary that maps more code pages.
//!
//! Run: `cargo bench -p podward-e2e --bench shim_overhead` (root; about 5 minutes).
//! `-- --buffers 16,256` adds shims with those relay read buffers (KiB) to the mix rounds;
//! `-- --multi` adds a shim on tokio's multi-threaded runtime; `-- --bare` three bare relays
//! (containerd's side read with the shim's default buffer, no HTTP/2 reader): on the shim's
//! current-thread runtime "bare relay", tokio's `copy_bidirectional`, and "bare rd-wait", the
//! same copy with its sockets waited on for reading alone as the shim's are; and "bare thread",
//! a thread per connection blocking in `poll(2)`, socat's loop without a runtime: the floors of
//! a user-space relay, beside socat's;
//! `-- --read-every` has the shims read every repeating large List (as they do at kubelet's
//! pace of one a second) rather than at most one per request every 250 ms, as shipped: the mix
//! and the 4 MiB phase List far faster than kubelet does;
//! `-- --self-shim` runs the shim under test that way too (as before the shipped binary was
//! measured), for comparison;
//! `-- --skip-mix` leaves out the mix rounds (4 MiB List, RSS and idle CPU only),
//! `-- --mix-only` runs them alone (`--rounds N`, default 10, for a profiler to attach), `-- --go`
//! then measures the mix as a kubelet makes it, with kubelet's own stack (`go_bench.rs`: one
//! gRPC-Go process, one warmed-up connection per path, 16 goroutines sharing it at c=16). Extra
//! paths run in every round, the 4 MiB Lists included.

mod calls;
mod figures;
mod go_bench;
mod relays;

use calls::{client, populate, round};
use figures::{Path3, Rss, cpu_ns, cpu_ticks, load_average, num_cpus, pct, ticks_ms, us};
use relays::{
    ShimBuild, as_bare_relay, as_read_wait_relay, as_shim, as_thread_relay, start_bare_relay,
    start_read_wait_relay, start_shim, start_socat, start_thread_relay,
};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use podward_api::cri;
use podward_e2e::TestNode;
use rand::SeedableRng;
use rand::seq::SliceRandom;

/// Mix rounds per concurrency unless `--rounds` says otherwise.
const MIX_ROUNDS: usize = 10;
const MIXES_PER_ROUND: usize = 100;
/// ~4 MiB ListContainers per path. A List's time swings by several ms either way (containerd's
/// garbage collector, the other core), so the median of one path's List less direct's in the
/// same round needs many Lists to settle: with fewer, the shim ÷ bare-relay ratio moved more
/// from run to run of one build than the goal leaves (docs/benchmarks.md, Shim).
const BIG_LISTS: usize = 1000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // Child modes: this binary re-executed as one of the relays under test.
    let child: Option<fn(&[String])> = match args.get(1).map(String::as_str) {
        Some("--as-shim") => Some(as_shim),
        Some("--as-bare-relay") => Some(as_bare_relay),
        Some("--as-read-wait-relay") => Some(as_read_wait_relay),
        Some("--as-thread-relay") => Some(as_thread_relay),
        _ => None,
    };
    if let Some(child) = child {
        child(&args[2..]);
        return;
    }
    if args.iter().any(|a| a == "--list") {
        // `cargo bench -- --list` style probes: nothing to list.
        return;
    }
    let buffers: Vec<usize> = args
        .iter()
        .position(|a| a == "--buffers")
        .and_then(|i| args.get(i + 1))
        .map(|v| v.split(',').filter_map(|k| k.trim().parse().ok()).collect())
        .unwrap_or_default();
    let rounds = args
        .iter()
        .position(|a| a == "--rounds")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(MIX_ROUNDS);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let opts = Opts {
        buffers,
        multi: args.iter().any(|a| a == "--multi"),
        skip_mix: args.iter().any(|a| a == "--skip-mix"),
        mix_only: args.iter().any(|a| a == "--mix-only"),
        go: args.iter().any(|a| a == "--go"),
        rounds,
        bare: args.iter().any(|a| a == "--bare"),
        read_every: args.iter().any(|a| a == "--read-every"),
        self_shim: args.iter().any(|a| a == "--self-shim"),
    };
    rt.block_on(bench(opts));
}

/// What to run (the flags after `--`).
struct Opts {
    /// `--buffers K,...`: extra shims with these relay read buffers (KiB).
    buffers: Vec<usize>,
    /// `--multi`: an extra shim on the multi-threaded runtime.
    multi: bool,
    /// `--skip-mix`: no mix rounds (the 4 MiB List, RSS and idle CPU only).
    skip_mix: bool,
    /// `--mix-only`: the mix rounds alone.
    mix_only: bool,
    /// `--go`: the mix rounds again with the gRPC-Go client.
    go: bool,
    /// `--rounds N`: mix rounds per concurrency.
    rounds: usize,
    /// `--bare`: bare relays (no side reader) as further floors.
    bare: bool,
    /// `--read-every`: the shims read every repeating large List, as at kubelet's pace, instead
    /// of at most one per request every 250 ms (the shipped default).
    read_every: bool,
    /// `--self-shim`: the shim under test is this binary re-executed, not the shipped one.
    self_shim: bool,
}

async fn bench(
    Opts {
        buffers,
        multi,
        skip_mix,
        mix_only,
        go,
        rounds,
        bare,
        read_every,
        self_shim,
    }: Opts,
) {
    let node = TestNode::start().await.expect("node");
    // The shim as it ships: its default read buffer.
    let default_kib = podward_shim::relay::DEFAULT_BUFFER >> 10;
    let child = |buffer_kib, flavour| ShimBuild::Child {
        buffer_kib,
        flavour,
        read_every,
    };
    let shim = if self_shim || read_every {
        start_shim(&node, "shim", child(default_kib, "current")).await
    } else {
        start_shim(&node, "shim", ShimBuild::Shipped).await
    };
    let socat = start_socat(&node).await;
    let mut extra = Vec::new();
    for kib in &buffers {
        let name = format!("shim {kib} KiB");
        let s = start_shim(&node, &format!("shim-{kib}k"), child(*kib, "current")).await;
        extra.push((name, s));
    }
    if multi {
        let s = start_shim(&node, "shim-multi", child(default_kib, "multi")).await;
        extra.push(("shim multi-thr".to_owned(), s));
    }
    if bare {
        extra.push(("bare relay".to_owned(), start_bare_relay(&node).await));
        extra.push((
            "bare rd-wait".to_owned(),
            start_read_wait_relay(&node).await,
        ));
        extra.push(("bare thread".to_owned(), start_thread_relay(&node).await));
    }

    let direct = node.containerd_socket();
    // Direct first, socat second, the shim third: the figures below are taken against these.
    let paths = || {
        let mut paths = vec![
            Path3::new("direct", &direct),
            Path3::new("socat", &socat.path),
            Path3::new("shim", &shim.cri),
        ];
        paths.extend(extra.iter().map(|(name, s)| Path3::new(name, &s.cri)));
        paths
    };
    println!(
        "# podward-shim overhead (containerd 1.6, release build, {} cores; direct, socat, shim interleaved; load average {})",
        num_cpus(),
        load_average()
    );

    let pid = shim.child.id();
    eprintln!("shim pid {pid}");
    let mut phases = vec![Rss::of(pid, "at start")];
    let (sid, cids) = populate(&node, &direct, "mix", 100, 0).await;
    let cid = cids[0].clone();
    let warm = Arc::new(AtomicU64::new(0));
    for p in [direct.as_path(), socat.path.as_path(), shim.cri.as_path()] {
        let _ = round(p, 1, &sid, &cid, &warm).await;
    }
    let mut relays = vec![("the shim".to_owned(), pid)];
    relays.extend(extra.iter().map(|(name, s)| (name.clone(), s.child.id())));
    let concurrencies: &[usize] = if skip_mix { &[] } else { &[1, 16] };
    for &conc in concurrencies {
        mix_rounds(paths(), conc, rounds, &sid, &cid, &relays).await;
    }
    if go && !skip_mix {
        let work = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cri-go");
        let bin = podward_e2e::go_client(&work).expect("the gRPC-Go client");
        // The relay serving each path, whose CPU the client counts (socat's per-connection
        // children included); direct has none.
        let mut pids = vec![0, socat.child.id(), pid];
        pids.extend(extra.iter().map(|(_, s)| s.child.id()));
        go_bench::run(&bin, paths(), &pids, &sid, &cid).await;
    }
    if mix_only {
        println!("load average at the end: {}", load_average());
        return;
    }
    phases.push(Rss::of(
        pid,
        "after the mix rounds (100 containers indexed)",
    ));

    // ~4 MiB ListContainers: 100 containers with 40 KiB of annotations each.
    let (big_sid, _) = populate(&node, &direct, "big", 100, 40 * 1024).await;
    phases.push(Rss::of(
        pid,
        "after 100 containers with 40 KiB annotations were created (direct)",
    ));
    big_lists(paths(), &big_sid, &relays).await;
    phases.push(Rss::of(
        pid,
        "after the 4 MiB Lists (their 100 containers, 4 MiB of annotations, indexed too)",
    ));

    // 1,000 containers indexed: created through the shim (it indexes them as it relays).
    for b in 0..10 {
        let _ = populate(&node, &shim.cri, &format!("many-{b}"), 90, 0).await;
    }
    // The last creates are folded in by the decoder thread just after their answers went out.
    let deadline = Instant::now() + Duration::from_secs(10);
    while shim.indexed_containers().await.unwrap_or(0) < 1_100 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let indexed = Rss::of(pid, "with 1,100 containers indexed");
    let snap = podward_api::shim::v1::lifecycle_client::LifecycleClient::new(
        podward_api::socket::channel(shim.control.clone()),
    )
    .max_decoding_message_size(podward_api::limits::API_MESSAGE_BYTES)
    .snapshot(podward_api::shim::v1::SnapshotRequest {})
    .await
    .expect("snapshot")
    .into_inner();
    println!(
        "shim RSS with {} containers / {} sandboxes indexed: {:.1} MiB (goal ≤ 16)",
        snap.containers.len(),
        snap.sandboxes.len(),
        indexed.vm_rss_kb as f64 / 1024.0,
    );
    drop(snap);
    phases.push(indexed);
    phases.push(Rss::of(
        pid,
        "right after a Snapshot (a copy of the whole index, encoded and sent)",
    ));
    // The shim gives a snapshot's freed memory back a while after (shim/src/memory.rs).
    tokio::time::sleep(Duration::from_secs(3)).await;
    phases.push(Rss::of(pid, "3 s later"));
    println!("shim RSS along the way (VmRSS / RssAnon):");
    for p in &phases {
        println!(
            "  {:>5.1} / {:>5.1} MiB {}",
            p.vm_rss_kb as f64 / 1024.0,
            p.rss_anon_kb as f64 / 1024.0,
            p.what
        );
    }

    let t0 = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = cpu_ticks(pid).saturating_sub(t0);
    println!(
        "shim idle CPU over 10 s: {:.2}% of one core ({idle} ticks)",
        ticks_ms(idle) / 10e3 * 100.0,
    );
    println!("load average at the end: {}", load_average());
    drop(extra);
    drop(socat);
    drop(shim);
    drop(node);
}

/// `rounds` rounds of the call mix at concurrency `conc` on every path with the tonic client,
/// interleaved, and their figures ([`report`]), with the CPU each of `relays` (name, pid) spent
/// per call.
async fn mix_rounds(
    mut paths: Vec<Path3>,
    conc: usize,
    rounds: usize,
    sid: &str,
    cid: &str,
    relays: &[(String, u32)],
) {
    let tag = format!("concurrency {conc:>2} tonic  ");
    let cpu_before: Vec<u64> = relays.iter().map(|(_, pid)| cpu_ns(*pid)).collect();
    for r in 0..rounds {
        // Rotate which path goes first so drift hits all equally.
        let n = paths.len();
        for k in 0..n {
            let p = &mut paths[(r + k) % n];
            let (lat, wall) = round(&p.path, conc, sid, cid, &p.failures).await;
            // Each task's mixes are whole (a failed mix fails the path): five calls in order.
            for mix in lat.chunks(calls::MIX.len()) {
                for (by, t) in p.by_call.iter_mut().zip(mix) {
                    by.push(*t);
                }
            }
            p.lat.extend(lat);
            p.wall += wall;
        }
    }
    // Every relay serves one path: its CPU over the rounds is that path's alone.
    let calls = (rounds * crate::MIXES_PER_ROUND / conc.max(1) * conc.max(1) * 5) as f64;
    let cpu: Vec<(String, f64)> = relays
        .iter()
        .zip(cpu_before)
        .map(|((name, pid), before)| {
            let us = cpu_ns(*pid).saturating_sub(before) as f64 / 1e3 / calls;
            (name.clone(), us)
        })
        .collect();
    report(&tag, &mut paths, &cpu);
}

/// The figures of one set of interleaved rounds: each path's p50/p99 and throughput against
/// direct's (`paths[0]`), the shim's (`paths[2]`) added p50 and throughput against socat's
/// (`paths[1]`), each call's own added p50, and `cpu`: (relay, µs of its CPU per call).
pub(crate) fn report(tag: &str, paths: &mut [Path3], cpu: &[(String, f64)]) {
    for p in paths.iter_mut() {
        p.lat.sort();
        for by in &mut p.by_call {
            by.sort();
        }
    }
    if paths.iter().any(|p| p.lat.is_empty()) {
        println!("{tag}: a path made no call: no figures");
        return;
    }
    let (d_p50, d_p99, d_tp) = (
        us(pct(&paths[0].lat, 0.5)),
        us(pct(&paths[0].lat, 0.99)),
        paths[0].throughput(),
    );
    for p in paths.iter() {
        if !p.clean() {
            println!(
                "{tag}: {:<12} FAILED ({} failures): no figures",
                p.name,
                p.failures.load(Ordering::Relaxed)
            );
            continue;
        }
        println!(
            "{tag}: {:<12} p50 {:>6.0} µs (+{:>4.0}), p99 {:>6.0} µs (+{:>5.0}), {:>6.0} calls/s ({:>5.1}% of direct)",
            p.name,
            us(pct(&p.lat, 0.5)),
            us(pct(&p.lat, 0.5)) - d_p50,
            us(pct(&p.lat, 0.99)),
            us(pct(&p.lat, 0.99)) - d_p99,
            p.throughput(),
            100.0 * p.throughput() / d_tp,
        );
    }
    if paths.iter().all(Path3::clean) {
        let socat_added = us(pct(&paths[1].lat, 0.5)) - d_p50;
        for p in paths.iter().skip(2) {
            let added = us(pct(&p.lat, 0.5)) - d_p50;
            let tp_ratio = p.throughput() / paths[1].throughput();
            // A ratio to an added time of nothing (or less, as at c=16 where a relay can beat
            // direct) says nothing.
            let ratio = if socat_added >= 1.0 {
                format!("{:.2} × socat's", added / socat_added)
            } else {
                format!("+{added:.0} µs, socat's +{socat_added:.0}")
            };
            println!(
                "{tag}: {:<12} added p50 = {ratio} (goal ≤ 1.2 × at c=1); throughput = {:.1}% of socat's (goal ≥ 95% at c=16)",
                p.name,
                100.0 * tp_ratio
            );
        }
    }
    // Where the added time is: each call's own median against direct's.
    for p in paths.iter().skip(1).filter(|p| p.clean()) {
        let added: Vec<String> = calls::MIX
            .iter()
            .enumerate()
            .filter(|(i, _)| !p.by_call[*i].is_empty() && !paths[0].by_call[*i].is_empty())
            .map(|(i, name)| {
                let d = us(pct(&paths[0].by_call[i], 0.5));
                format!("{name} +{:.0}", us(pct(&p.by_call[i], 0.5)) - d)
            })
            .collect();
        println!(
            "{tag}: {:<12} added p50 by call (µs): {}",
            p.name,
            added.join(", ")
        );
    }
    for (name, us) in cpu {
        println!("{tag}: {name}'s CPU per call: {us:.1} µs");
    }
}

/// [`BIG_LISTS`] ListContainers of sandbox `sid` on every path, interleaved in a fresh random
/// order each round (seeded, so runs are alike), a new connection each; what each path adds to
/// direct's (`paths[0]`) and the CPU each of `relays` (name, pid) spent per List.
///
/// Two figures of "added": the median of each path less direct's median, and the
/// median over rounds of the path's List less direct's List in the same round. The second pairs
/// calls made within the same few tens of milliseconds, so what drifts over the phase (the
/// other core's load, containerd's garbage collector) cancels out instead of landing on one
/// path's median more than another's.
async fn big_lists(mut paths: Vec<Path3>, sid: &str, relays: &[(String, u32)]) {
    let filter = cri::ContainerFilter {
        pod_sandbox_id: sid.to_owned(),
        ..Default::default()
    };
    let n = paths.len();
    let mut size = 0usize;
    // `rounds[i][j]`: path j's List of round i, if it succeeded.
    let mut rounds: Vec<Vec<Option<Duration>>> = Vec::with_capacity(BIG_LISTS);
    let cpu_before: Vec<u64> = relays.iter().map(|(_, pid)| cpu_ticks(*pid)).collect();
    // Markers for a profiler attached to the shim (`perf record -p <shim pid>`).
    eprintln!("4 MiB Lists: start");
    // A fresh order every round, not a rotation: in a rotation each path always follows the
    // same one, and a List right after socat's meets its forked child still tearing down (and
    // containerd still freeing socat's answer), which lands on one path every time.
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x4d1b);
    let mut order: Vec<usize> = (0..n).collect();
    for _ in 0..BIG_LISTS {
        let mut row = vec![None; n];
        order.shuffle(&mut rng);
        for &j in &order {
            let p = &mut paths[j];
            // A new connection per call, as a client that dials per request would.
            let mut c = client(&p.path);
            let t = Instant::now();
            match c
                .list_containers(cri::ListContainersRequest {
                    filter: Some(filter.clone()),
                })
                .await
            {
                Ok(r) => {
                    let took = t.elapsed();
                    p.lat.push(took);
                    row[j] = Some(took);
                    size = tonic_prost::prost::Message::encoded_len(r.get_ref());
                }
                Err(e) => {
                    eprintln!("big ListContainers failed: {e:?}");
                    p.failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        rounds.push(row);
    }
    eprintln!("4 MiB Lists: end");
    for p in &mut paths {
        p.lat.sort();
    }
    let med = |p: &Path3| us(pct(&p.lat, 0.5)) / 1e3;
    let d = med(&paths[0]);
    let added = |j: usize| paired_added_ms(&rounds, j);
    println!(
        "ListContainers of {:.2} MiB, {BIG_LISTS} per path: median, and added as median − direct's \
         median / median of same-round differences:",
        size as f64 / (1 << 20) as f64
    );
    for (j, p) in paths.iter().enumerate() {
        if !p.clean() {
            println!(
                "  {:<14} FAILED ({} calls): no figures",
                p.name,
                p.failures.load(Ordering::Relaxed)
            );
            continue;
        }
        println!(
            "  {:<14} {:>6.2} ms (+{:.2} / +{:.2}){}",
            p.name,
            med(p),
            med(p) - d,
            added(j),
            if p.name == "shim" {
                " (goal ≤ 1.25 × the bare relay's, with --bare)"
            } else {
                ""
            }
        );
    }
    let shim = paths.iter().position(|p| p.name == "shim" && p.clean());
    for floor in ["bare relay", "bare rd-wait", "bare thread"] {
        let bare = paths.iter().position(|p| p.name == floor && p.clean());
        if let (Some(shim), Some(bare)) = (shim, bare) {
            println!(
                "  shim added = {:.2} × the {floor}'s by medians, {:.2} × by same-round differences \
                 (goal ≤ 1.25 × the bare relay's)",
                (med(&paths[shim]) - d) / (med(&paths[bare]) - d).max(0.01),
                added(shim) / added(bare).max(0.01)
            );
        }
    }
    for ((name, pid), before) in relays.iter().zip(cpu_before) {
        let ms = ticks_ms(cpu_ticks(*pid).saturating_sub(before)) / BIG_LISTS as f64;
        println!("  {name}'s CPU per List (utime+stime): {ms:.2} ms");
    }
}

/// The median, in ms, of path `j`'s List less direct's (path 0) in the same round, over the
/// rounds where both succeeded (0 when none did).
fn paired_added_ms(rounds: &[Vec<Option<Duration>>], j: usize) -> f64 {
    let mut diffs: Vec<f64> = rounds
        .iter()
        .filter_map(|r| Some(r[j]?.as_secs_f64() - r[0]?.as_secs_f64()))
        .map(|s| s * 1e3)
        .collect();
    if diffs.is_empty() {
        return 0.0;
    }
    diffs.sort_by(f64::total_cmp);
    diffs[diffs.len() / 2]
}
