//! `podward-housekeeper plan` over orphans whose volumes hold hostile file names (a terminal
//! sequence, a newline that would forge a table row, bytes that are not UTF-8): the text never
//! carries a control character or an extra line, and `--json` keeps each name's exact bytes.

#[path = "support/fake.rs"]
mod fake;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

use fake::{FakeNode, RecordingActuator, nth_uid, reconciler};
use podward_api::housekeeper::v1::Plan;
use podward_housekeeper::reconcile::Mode;
use podward_housekeeper::report::render;

/// The file names, one per orphan: what a pod wrote into its emptyDir.
const HOSTILE: [&[u8]; 4] = [
    b"\x1b[2J\x1b[31mscreen-cleared",
    b"x\nREMOVE_POD_DIR (done)  00000000-0000-4000-8000-00000000000f  forged",
    b"not-utf8-\xff\xfe-name",
    b"bidi-\xe2\x80\xaetxt.exe\r\t",
];

/// A planning pass over one orphan per hostile name, each with that file in its emptyDir.
async fn hostile_plan() -> (Arc<FakeNode>, Plan) {
    let node = FakeNode::new();
    for (i, name) in HOSTILE.iter().enumerate() {
        let vol = node
            .pod_dir(&nth_uid(i))
            .join("volumes/kubernetes.io~empty-dir/data");
        fs::create_dir_all(&vol).expect("mkdir");
        fs::write(vol.join(OsStr::from_bytes(name)), b"data").expect("write hostile name");
    }
    let act = Arc::new(RecordingActuator::default());
    let (r, clock) = reconciler(&node, &act, node.settings(Duration::ZERO));
    r.pass(Mode::DryRun).await;
    clock.advance(Duration::from_secs(60));
    let plan = r.pass(Mode::DryRun).await.0;
    assert!(plan.sources_ok, "{:?}", plan.sources);
    (node, plan)
}

#[tokio::test]
async fn plan_text_never_prints_a_control_character_or_an_extra_line() {
    let (_node, plan) = hostile_plan().await;
    let blocked: Vec<_> = plan
        .findings
        .iter()
        .filter(|f| f.category == "pod_dir")
        .collect();
    assert_eq!(blocked.len(), HOSTILE.len(), "{:#?}", plan.findings);

    let text = render(&plan, false).expect("render");
    let bad: Vec<char> = text
        .chars()
        .filter(|c| (c.is_control() && *c != '\n') || ('\u{202a}'..='\u{202e}').contains(c))
        .collect();
    assert!(bad.is_empty(), "control characters {bad:?} in:\n{text}");
    // One line per finding after the FINDING header: no name forged a row.
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("FINDING"))
        .skip(1)
        .collect();
    assert_eq!(rows.len(), plan.findings.len(), "{text}");
    assert!(rows.iter().all(|l| l.starts_with("BLOCKED")), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("REMOVE_POD_DIR")),
        "a forged action row:\n{text}"
    );
    // The names are still there for the operator to read, escaped.
    for shown in [
        "\\u{1b}[2J\\u{1b}[31mscreen-cleared",
        "x\\nREMOVE_POD_DIR (done)",
        "not-utf8-\\xff\\xfe-name",
        "bidi-\\u{202e}txt.exe\\r\\t",
    ] {
        assert!(text.contains(shown), "{shown} missing from:\n{text}");
    }
}

#[tokio::test]
async fn plan_json_keeps_each_names_exact_bytes() {
    let (node, plan) = hostile_plan().await;
    let json = render(&plan, true).expect("render");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let reasons: Vec<String> = v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["reason"].as_str().map(str::to_owned))
        .collect();
    for (i, name) in HOSTILE.iter().enumerate() {
        let path = node
            .pod_dir(&nth_uid(i))
            .join("volumes/kubernetes.io~empty-dir/data")
            .join(OsStr::from_bytes(name));
        let exact = podward_api::outside_text::from_bytes(path.as_os_str().as_bytes());
        assert!(
            reasons.iter().any(|r| r.contains(&exact)),
            "{exact:?} not in {reasons:#?}"
        );
    }
    // Valid UTF-8 is kept as it is (JSON escapes it): ESC and the newline are there, not `\u{..}`.
    assert!(
        reasons.iter().any(|r| r.contains("\u{1b}[2J")),
        "{reasons:#?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("x\nREMOVE_POD_DIR")),
        "{reasons:#?}"
    );
    assert!(!json.contains('\u{1b}'), "raw ESC in the JSON text");
}
