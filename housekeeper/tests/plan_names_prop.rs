//! Property: whatever names are under the kubelet, log and cgroup roots (unicode, dots, `..`,
//! very long names, UUID-like near misses, kubelet's shapes in the wrong root, symlinks and files
//! named like pods), acting passes plan and remove exactly the directories in kubelet's shapes
//! and leave every other entry as it was.
//!
//! The shapes are re-stated here on their own (not with the crate's parser), from kubelet's
//! sources: a UID is a lowercase 8-4-4-4-12 hex UUID or a 32-hex config hash; a log dir is
//! `<DNS-1123 label>_<DNS-1123 subdomain>_<uid>` or a legacy `<uid>`; a pod cgroup is `pod<uid>`.

#[path = "support/fake.rs"]
mod fake;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fake::{FakeNode, RecordingActuator, reconciler};
use podward_api::housekeeper::v1::{ActionKind, Finding, FindingKind, Plan};
use podward_housekeeper::reconcile::Mode;
use proptest::prelude::*;
use proptest::sample::Index;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Root {
    Pods,
    Logs,
    Cgroup,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Symlink,
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

fn spec_uid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    (s.len() == 32 && is_hex(s))
        || (groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12]) && groups.iter().all(|g| is_hex(g)))
}

fn spec_label_body(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn spec_log_dir(s: &str) -> bool {
    let parts: Vec<&str> = s.split('_').collect();
    match parts.as_slice() {
        [uid] => spec_uid(uid),
        [ns, name, uid] => {
            ns.len() <= 63
                && spec_label_body(ns)
                && name.len() <= 253
                && name.split('.').all(spec_label_body)
                && spec_uid(uid)
        }
        _ => false,
    }
}

fn kubelets(root: Root, name: &str) -> bool {
    match root {
        Root::Pods => spec_uid(name),
        Root::Logs => spec_log_dir(name),
        Root::Cgroup => name.strip_prefix("pod").is_some_and(spec_uid),
    }
}

fn uid() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "[0-9a-f]{32}",
    ]
}

/// A UID one edit away from kubelet's shape (or, rarely, still in it: the oracle decides).
fn near_miss() -> impl Strategy<Value = String> {
    (uid(), 0..6u8, any::<Index>()).prop_map(|(u, op, at)| {
        let mut c: Vec<char> = u.chars().collect();
        let i = at.index(c.len());
        match op {
            0 => c[i] = c[i].to_ascii_uppercase(),
            1 => {
                c.remove(i);
            }
            2 => c.insert(i, 'a'),
            3 => c[i] = 'g',
            4 => c = u.replace('-', "_").chars().collect(),
            _ => c[i] = '.',
        }
        c.into_iter().collect()
    })
}

fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?"
}

fn log_name() -> impl Strategy<Value = String> {
    let part = prop_oneof![label(), "[A-Za-z0-9._-]{0,12}", Just(String::new())];
    let uidish = prop_oneof![uid(), near_miss()];
    prop_oneof![
        (label(), "[a-z0-9]{1,4}(\\.[a-z0-9]{1,4}){0,2}", uid())
            .prop_map(|(n, p, u)| format!("{n}_{p}_{u}")),
        (part.clone(), part, uidish).prop_map(|(n, p, u)| format!("{n}_{p}_{u}")),
    ]
}

fn special() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "...",
        "..a",
        "a..",
        " ",
        "-",
        "_",
        "__",
        "a_b_c",
        "pod",
        "pod..",
        "pod.",
        "a\nb",
        "etc",
        "home",
        "config",
        "\u{202e}evil",
        "\u{0}x",
    ])
    .prop_map(str::to_owned)
}

fn long() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".repeat(255)),
        uid().prop_map(|u| format!("{u}{}", "0".repeat(255 - u.len()))),
        label().prop_map(|l| format!("ns_{}_{}", l.repeat(20), "0".repeat(32))),
    ]
}

fn name(root: Root) -> BoxedStrategy<String> {
    let any_name = prop_oneof![
        3 => uid(),
        3 => near_miss(),
        3 => log_name(),
        2 => "\\PC{1,24}",
        1 => special(),
        1 => long(),
    ];
    match root {
        Root::Cgroup => prop_oneof![
            3 => prop_oneof![uid(), near_miss(), "\\PC{1,12}", special()]
                .prop_map(|s| format!("pod{s}")),
            1 => any_name,
        ]
        .boxed(),
        _ => any_name.boxed(),
    }
}

fn entry() -> impl Strategy<Value = (Root, String, Kind)> {
    prop_oneof![Just(Root::Pods), Just(Root::Logs), Just(Root::Cgroup)].prop_flat_map(|root| {
        let kind = if root == Root::Cgroup {
            Just(Kind::Dir).boxed()
        } else {
            prop_oneof![3 => Just(Kind::Dir), 1 => Just(Kind::File), 1 => Just(Kind::Symlink)]
                .boxed()
        };
        (Just(root), name(root), kind)
    })
}

/// A name a directory entry can have.
fn creatable(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && !name.contains(['/', '\0'])
}

struct Tree {
    node: Arc<FakeNode>,
    /// (root, name) → kind, for what was actually created.
    entries: BTreeMap<(Root, String), Kind>,
    outside: PathBuf,
}

impl Tree {
    fn dir(&self, root: Root) -> PathBuf {
        match root {
            Root::Pods => self.node.kubelet_root().join("pods"),
            Root::Logs => self.node.root().join("logs"),
            Root::Cgroup => self.node.root().join("cgroup/kubepods/burstable"),
        }
    }

    fn build(entries: Vec<(Root, String, Kind)>) -> Self {
        let node = FakeNode::new();
        let outside = node.root().join("outside");
        fs::create_dir_all(&outside).expect("outside");
        fs::write(outside.join("sentinel"), "outside").expect("sentinel");
        let mut t = Tree {
            node,
            entries: BTreeMap::new(),
            outside,
        };
        for (root, name, kind) in entries {
            if !creatable(&name) || t.entries.contains_key(&(root, name.clone())) {
                continue;
            }
            let path = t.dir(root).join(&name);
            match kind {
                Kind::Dir => {
                    fs::create_dir(&path).expect("mkdir");
                    // Cgroup dirs stay empty (the fake actuator rmdirs them); others hold data.
                    if root != Root::Cgroup {
                        fs::write(path.join("data"), "user data").expect("data");
                    }
                }
                Kind::File => fs::write(&path, "user data").expect("file"),
                Kind::Symlink => std::os::unix::fs::symlink(&t.outside, &path).expect("symlink"),
            }
            t.entries.insert((root, name), kind);
        }
        t
    }

    /// The entry is exactly as it was created.
    fn intact(&self, root: Root, name: &str, kind: Kind) -> bool {
        let path = self.dir(root).join(name);
        match kind {
            Kind::Dir if root == Root::Cgroup => path.is_dir(),
            Kind::Dir => fs::read_to_string(path.join("data")).is_ok_and(|d| d == "user data"),
            Kind::File => fs::read_to_string(&path).is_ok_and(|d| d == "user data"),
            Kind::Symlink => path.is_symlink(),
        }
    }
}

/// The root and entry name an action targets.
fn target(a: &podward_api::housekeeper::v1::Action) -> (Root, String) {
    let root = match a.kind() {
        ActionKind::RemovePodDir => Root::Pods,
        ActionKind::RemoveLogDir => Root::Logs,
        ActionKind::RemoveCgroup | ActionKind::ReduceCpu => Root::Cgroup,
        other => panic!("unexpected action {other:?}: {a:?}"),
    };
    let name = Path::new(&a.target)
        .file_name()
        .expect("a final component")
        .to_string_lossy()
        .into_owned();
    (root, name)
}

fn is_foreign(f: &Finding) -> bool {
    FindingKind::try_from(f.kind).is_ok_and(|k| k.as_str_name() == "FOREIGN")
}

fn run(entries: Vec<(Root, String, Kind)>) -> Result<(), TestCaseError> {
    let tree = Tree::build(entries);
    let act = Arc::new(RecordingActuator {
        really: true,
        ..Default::default()
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let plans: Vec<Plan> = rt.block_on(async {
        let (r, clock) = reconciler(&tree.node, &act, tree.node.settings(Duration::ZERO));
        let mut plans = Vec::new();
        for _ in 0..3 {
            clock.advance(Duration::from_secs(1));
            plans.push(r.pass(Mode::Act).await.0);
        }
        plans
    });
    for plan in &plans {
        prop_assert!(plan.sources_ok, "{:?}", plan.sources);
        for a in &plan.actions {
            let (root, name) = target(a);
            prop_assert!(
                kubelets(root, &name),
                "planned {:?} on {root:?}/{name:?}, not in kubelet's shape",
                a.kind()
            );
            prop_assert_eq!(
                tree.entries.get(&(root, name.clone())),
                Some(&Kind::Dir),
                "planned on something that is not a directory: {:?}",
                a
            );
        }
    }
    for ((root, name), kind) in &tree.entries {
        let ours = *kind == Kind::Dir && kubelets(*root, name);
        let path = tree.dir(*root).join(name);
        if ours {
            prop_assert!(
                fs::symlink_metadata(&path).is_err(),
                "kubelet's orphan {root:?}/{name:?} was left"
            );
        } else {
            prop_assert!(
                tree.intact(*root, name, *kind),
                "{root:?}/{name:?} ({kind:?}) was touched"
            );
            // Under the pod and log roots, what is not kubelet's is listed as FOREIGN.
            if *root != Root::Cgroup {
                let shown = path.display().to_string();
                prop_assert!(
                    plans[0]
                        .findings
                        .iter()
                        .any(|f| is_foreign(f) && f.target == shown),
                    "{root:?}/{name:?} not reported as FOREIGN"
                );
            }
        }
    }
    let sentinel = fs::read_to_string(tree.outside.join("sentinel")).ok();
    prop_assert_eq!(sentinel.as_deref(), Some("outside"));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn nothing_outside_kubelets_name_shapes_is_ever_planned_or_removed(
        entries in prop::collection::vec(entry(), 1..40)
    ) {
        run(entries)?;
    }
}

#[test]
fn the_oracle_matches_the_examples_it_is_built_from() {
    assert!(spec_uid("6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b"));
    assert!(spec_uid("0123456789abcdef0123456789abcdef"));
    assert!(!spec_uid("6B1AA4D4-6D1F-4F65-AE2B-0E0AD1DC5B1B"));
    assert!(spec_log_dir(
        "kube-system_coredns-5d78c9869d-abcde_6b1aa4d4-6d1f-4f65-ae2b-0e0ad1dc5b1b"
    ));
    assert!(!spec_log_dir("etc"));
    assert!(kubelets(
        Root::Cgroup,
        "pod0123456789abcdef0123456789abcdef"
    ));
}
