//! A hostile pod's emptyDir that outlived the pod: one directory of 600,000 empty files with
//! 240-byte names, on a real filesystem (a tmpfs: building the tree on the disk takes minutes on a
//! busy machine; `benches/housekeeper_pass.rs --worst` runs the same orphans on the disk). A pass
//! over it (beside an orphan whose clean tree is larger than a walk may look at) stays within a
//! small memory bound and a few seconds, reports both orphans precisely, and `Status` answers while
//! it runs.
//!
//! Alone in its file: the peak RSS it checks is the test process's.

#[path = "support/fake.rs"]
mod fake;
#[path = "support/tmpfs.rs"]
mod tmpfs;

use std::fs;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake::{FakeNode, RecordingActuator, nth_uid, reconciler};
use podward_api::housekeeper::v1::FindingKind;
use podward_housekeeper::node::pod_dir::WalkBounds;
use podward_housekeeper::reconcile::Mode;
use rustix::fs::{Mode as Perm, OFlags};

/// The attack's directory: this many files...
const FILES: usize = 600_000;
/// ...with names this long.
const NAME_LEN: usize = 240;
/// Files in the orphan whose (removable) tree is larger than a walk looks at.
const CLEAN_FILES: usize = 150_000;
/// How much the pass may add to the process's peak RSS (docs/benchmarks.md, "housekeeper").
const RSS_GROWTH_KIB: u64 = 24 * 1024;
/// How long the pass may take.
const PASS_TIME: Duration = Duration::from_secs(10);
/// The slowest `Status` answer accepted while the pass runs.
const API_LATENCY: Duration = Duration::from_millis(500);

fn kib(field: &str) -> u64 {
    fs::read_to_string("/proc/self/status")
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("field")
}

/// `n` empty files in `dir`, names padded to [`NAME_LEN`] (created through one dir fd).
fn fill(dir: &Path, n: usize) {
    fs::create_dir_all(dir).expect("mkdir");
    let fd: OwnedFd =
        rustix::fs::open(dir, OFlags::DIRECTORY | OFlags::RDONLY, Perm::empty()).expect("open dir");
    let pad = "f".repeat(NAME_LEN - 8);
    for i in 0..n {
        let name = format!("{pad}{i:08}");
        let flags = OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC;
        drop(
            rustix::fs::openat(&fd, name.as_str(), flags, Perm::from_raw_mode(0o644))
                .expect("create"),
        );
    }
}

#[test]
fn a_600k_entry_orphan_costs_little_memory_and_never_stalls_the_api() {
    let node = FakeNode::new();
    let _tmpfs = tmpfs::Tmpfs::mount(&node.kubelet_root().join("pods"));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(pass_over_the_worst_orphans(node.clone()));
    // `node` (the temp dir) goes after the tmpfs: unmounting frees the 750,000 files at once.
}

async fn pass_over_the_worst_orphans(node: Arc<FakeNode>) {
    let hostile = nth_uid(1);
    let clean = nth_uid(2);
    let built = Instant::now();
    fill(
        &node
            .pod_dir(&hostile)
            .join("volumes/kubernetes.io~empty-dir/data/big"),
        FILES,
    );
    fill(
        &node.pod_dir(&clean).join("containers/app/many"),
        CLEAN_FILES,
    );
    println!(
        "built {FILES} + {CLEAN_FILES} files in {:?}",
        built.elapsed()
    );

    let act = Arc::new(RecordingActuator::default());
    let (r, clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    let r = Arc::new(r);
    // The first pass sees the UIDs for the first time (WAITING); the second assesses.
    r.pass(Mode::DryRun).await;
    clock.advance(Duration::from_secs(60));

    let rss_before = kib("VmRSS:");
    let pass = tokio::spawn({
        let r = r.clone();
        async move {
            let t = Instant::now();
            let (plan, _) = r.pass(Mode::DryRun).await;
            (plan, t.elapsed())
        }
    });
    let mut during = 0;
    let mut slowest = Duration::ZERO;
    while !pass.is_finished() {
        let t = Instant::now();
        let status = r.status().await;
        let took = t.elapsed();
        if !pass.is_finished() {
            during += 1;
            slowest = slowest.max(took);
        }
        assert!(status.passes >= 1);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (plan, took) = pass.await.expect("pass");
    let growth = kib("VmHWM:").saturating_sub(rss_before);
    println!(
        "pass {took:?}, peak RSS +{growth} KiB, {during} Status answers during it, slowest {slowest:?}"
    );

    assert!(during > 0, "no Status answer while the pass ran ({took:?})");
    assert!(
        slowest < API_LATENCY,
        "Status waited {slowest:?} on the pass"
    );
    assert!(took < PASS_TIME, "the pass took {took:?}");
    assert!(
        growth < RSS_GROWTH_KIB,
        "the pass grew the peak RSS by {growth} KiB"
    );
    let reason = |uid: &str| {
        let f = plan
            .findings
            .iter()
            .find(|f| f.pod_uid == uid && f.category == "pod_dir")
            .unwrap_or_else(|| panic!("no pod_dir finding for {uid}: {:#?}", plan.findings));
        assert_eq!(f.kind(), FindingKind::Blocked, "{f:?}");
        f.reason.clone()
    };
    let hostile_reason = reason(&hostile);
    assert!(
        hostile_reason.contains("/volumes/kubernetes.io~empty-dir/data/big/ffff")
            && hostile_reason.ends_with("is a regular file in a volume directory"),
        "{hostile_reason}"
    );
    let clean_reason = reason(&clean);
    let bound = WalkBounds::DEFAULT.max_entries;
    assert!(
        clean_reason.contains("too large to assess this pass")
            && clean_reason.contains(&format!("stops at {bound} entries")),
        "{clean_reason}"
    );
    assert!(plan.actions.is_empty(), "{:#?}", plan.actions);
    assert!(node.pod_dir(&clean).join("containers/app/many").exists());
}
