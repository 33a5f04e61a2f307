//! The wire contract's breaking-change check (docs/architecture.md, "Wire contract"): every
//! field, enum value and RPC of podward's three protos as recorded in `wire_contract.txt` must
//! still be there with the same number, name, type and label, or be `reserved` (number and
//! name) after its removal. New ones may be added; a recorded line never changes. Run with
//! `PODWARD_WIRE_RECORD=1` to append the lines of what was added (never to change one).
//!
//! Beside it, golden encodings of the first message of the shim's Watch: its bytes must decode
//! the same in every later release.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;

const PROTOS: [&str; 3] = [
    "podward/shim/v1/lifecycle.proto",
    "podward/prober/v1/prober.proto",
    "podward/housekeeper/v1/housekeeper.proto",
];

/// One proto's contract: `package.Message.field = N : label type` lines (and enum values,
/// RPCs), plus what is reserved in each scope.
#[derive(Default)]
struct Contract {
    lines: BTreeSet<String>,
    /// `package.Scope#N` and `package.Scope#name` for every reserved number and name.
    reserved: HashSet<String>,
}

fn strip_comment(l: &str) -> &str {
    l.split("//").next().unwrap_or("").trim()
}

/// `package.Outer.Inner` of the scopes open now (a oneof is not one: its fields are its
/// message's).
fn scope_of(package: &str, scopes: &[(String, bool)]) -> String {
    let names: Vec<&str> = scopes
        .iter()
        .filter(|(_, counts)| *counts)
        .map(|(n, _)| n.as_str())
        .collect();
    format!("{package}.{}", names.join("."))
}

fn parse(text: &str, c: &mut Contract) {
    let mut package = String::new();
    let mut scopes: Vec<(String, bool)> = Vec::new(); // (name, is_scope_that_counts)
    for raw in text.lines() {
        let l = strip_comment(raw);
        if l.is_empty() {
            continue;
        }
        if ["syntax", "import", "option"]
            .iter()
            .any(|k| l.starts_with(k))
        {
            continue;
        }
        if let Some(p) = l.strip_prefix("package ") {
            package = p.trim_end_matches(';').trim().to_owned();
            continue;
        }
        let words: Vec<&str> = l.split_whitespace().collect();
        match words.first().copied() {
            Some("message" | "enum" | "service") if l.ends_with('{') => {
                scopes.push((words[1].to_owned(), true));
                continue;
            }
            Some("oneof") if l.ends_with('{') => {
                // A oneof's fields belong to the message; the oneof itself is named.
                scopes.push((words[1].to_owned(), false));
                c.lines.insert(format!(
                    "{}.oneof {}",
                    scope_of(&package, &scopes),
                    words[1]
                ));
                continue;
            }
            Some("}") => {
                scopes.pop();
                continue;
            }
            Some("rpc") => {
                c.lines.insert(format!(
                    "{}.{}",
                    scope_of(&package, &scopes),
                    l.trim_end_matches(';')
                ));
                continue;
            }
            Some("reserved") => {
                let s = scope_of(&package, &scopes);
                for part in l["reserved".len()..].trim_end_matches(';').split(',') {
                    let part = part.trim().trim_matches('"');
                    if let Some((a, b)) = part.split_once(" to ") {
                        let (a, b): (u32, u32) = (
                            a.trim().parse().expect("a reserved range's start"),
                            b.trim().parse().expect("a reserved range's end"),
                        );
                        for n in a..=b {
                            c.reserved.insert(format!("{s}#{n}"));
                        }
                    } else {
                        c.reserved.insert(format!("{s}#{part}"));
                    }
                }
                continue;
            }
            _ => {}
        }
        // A field (`[repeated] type name = N;`) or an enum value (`NAME = N;`).
        let Some((left, num)) = l.trim_end_matches(';').split_once('=') else {
            continue;
        };
        let num = num.trim();
        let left: Vec<&str> = left.split_whitespace().collect();
        let Some((name, ty)) = left.split_last() else {
            continue;
        };
        let ty = if ty.is_empty() {
            "value".to_owned()
        } else {
            ty.join(" ")
        };
        c.lines.insert(format!(
            "{}.{name} = {num} : {ty}",
            scope_of(&package, &scopes)
        ));
    }
}

fn current() -> Contract {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut c = Contract::default();
    for p in PROTOS {
        let text = std::fs::read_to_string(root.join(p)).expect("read proto");
        parse(&text, &mut c);
    }
    c
}

/// `pkg.Scope.name = N : type` → (`pkg.Scope`, name, N).
fn key(line: &str) -> Option<(&str, &str, &str)> {
    let (path, rest) = line.split_once(" = ")?;
    let (scope, name) = path.rsplit_once('.')?;
    let num = rest.split(" : ").next()?;
    Some((scope, name, num))
}

#[test]
fn every_recorded_field_value_and_rpc_is_still_there_or_reserved() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let file = root.join("tests/wire_contract.txt");
    let recorded: Vec<String> = std::fs::read_to_string(&file)
        .expect("tests/wire_contract.txt")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let now = current();
    let mut broken = Vec::new();
    for line in &recorded {
        if now.lines.contains(line) {
            continue;
        }
        // Gone: allowed only when its number and name are both reserved in its scope.
        let reserved = key(line).is_some_and(|(scope, name, num)| {
            now.reserved.contains(&format!("{scope}#{num}"))
                && now.reserved.contains(&format!("{scope}#{name}"))
        });
        if !reserved {
            broken.push(line.clone());
        }
    }
    assert!(
        broken.is_empty(),
        "wire contract broken (changed, or removed without `reserved` number and name):\n{}",
        broken.join("\n")
    );
    // A number reused with another name or type in the same scope is a break too.
    let recorded_keys: HashSet<(String, String)> = recorded
        .iter()
        .filter_map(|l| key(l).map(|(s, _, n)| (s.to_owned(), n.to_owned())))
        .collect();
    let added: Vec<&String> = now.lines.iter().filter(|l| !recorded.contains(l)).collect();
    let reused: Vec<&&String> = added
        .iter()
        .filter(|l| {
            key(l).is_some_and(|(s, _, n)| recorded_keys.contains(&(s.to_owned(), n.to_owned())))
        })
        .collect();
    assert!(
        reused.is_empty(),
        "numbers reused with another meaning: {reused:?}"
    );
    if std::env::var_os("PODWARD_WIRE_RECORD").is_some() && !added.is_empty() {
        let mut text = std::fs::read_to_string(&file).expect("read");
        for l in &added {
            text.push_str(l);
            text.push('\n');
        }
        std::fs::write(&file, text).expect("record");
    } else {
        assert!(
            added.is_empty(),
            "not recorded yet (run with PODWARD_WIRE_RECORD=1 and commit tests/wire_contract.txt):\n{}",
            added
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[test]
fn the_check_sees_a_renumbered_field_and_accepts_a_reserved_one() {
    let mut before = Contract::default();
    parse(
        "package p;\nmessage M {\n  string a = 1;\n  int64 b = 2;\n}\n",
        &mut before,
    );
    let mut renumbered = Contract::default();
    parse(
        "package p;\nmessage M {\n  string a = 1;\n  int64 b = 3;\n}\n",
        &mut renumbered,
    );
    assert!(!before.lines.is_subset(&renumbered.lines));
    let mut removed = Contract::default();
    parse(
        "package p;\nmessage M {\n  reserved 2;\n  reserved \"b\";\n  string a = 1;\n}\n",
        &mut removed,
    );
    assert!(removed.reserved.contains("p.M#2") && removed.reserved.contains("p.M#b"));
    assert!(before.lines.contains("p.M.b = 2 : int64"));
}

/// The first message of a Watch from this release, encoded: an older or newer reader must decode
/// these bytes to the same values (field numbers and wire types are the contract).
#[test]
fn the_first_watch_message_decodes_as_recorded() {
    use podward_api::shim::v1::{Snapshot, WatchEvent, watch_event};
    use prost::Message;
    let ev = WatchEvent {
        seq: 7,
        observed_at_ns: 9,
        event: Some(watch_event::Event::Snapshot(Snapshot {
            seq: 7,
            instance_id: "i".into(),
            runtime_connected: true,
            complete: true,
            server_version: "v".into(),
            capabilities: vec!["snapshot-complete".into()],
            ..Default::default()
        })),
    };
    let golden = "080710091a1f0807120169280140014a01765211736e617073686f742d636f6d706c657465";
    let bytes = ev.encode_to_vec();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        hex, golden,
        "the encoding of the first Watch message changed"
    );
}
