//! The takeover's JSON Patch applied to YAML in place: `add` and `remove` on mapping keys and
//! `add` at the end of a sequence (`/-`), the only operations the takeover makes. A key added
//! to a mapping comes last; every other key keeps its place.

use serde_json::Value;
use serde_norway::Value as Yaml;

/// Applies `patch` (a JSON array of operations) to `doc`.
pub fn apply(doc: &mut Yaml, patch: &Value) -> Result<(), String> {
    let ops = patch.as_array().ok_or("the patch is not an array")?;
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op.get("path").and_then(Value::as_str).ok_or("no path")?;
        let tokens: Vec<String> = path
            .split('/')
            .skip(1)
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect();
        let (last, parents) = tokens.split_last().ok_or("empty path")?;
        let parent = walk(doc, parents).ok_or_else(|| format!("{path}: no such parent"))?;
        match kind {
            "remove" => {
                let removed = match parent {
                    Yaml::Mapping(m) => m.remove(last.as_str()),
                    _ => None,
                };
                removed.ok_or_else(|| format!("{path}: nothing to remove"))?;
            }
            "add" => {
                let value = op.get("value").ok_or("add without a value")?;
                let value = serde_norway::to_value(value).map_err(|e| e.to_string())?;
                match parent {
                    Yaml::Sequence(s) if last == "-" => s.push(value),
                    Yaml::Mapping(m) => {
                        m.insert(Yaml::String(last.clone()), value);
                    }
                    _ => return Err(format!("{path}: cannot add here")),
                }
            }
            other => return Err(format!("{path}: operation {other:?} not supported")),
        }
    }
    Ok(())
}

/// The value at `tokens` under `doc`.
fn walk<'a>(doc: &'a mut Yaml, tokens: &[String]) -> Option<&'a mut Yaml> {
    let mut at = doc;
    for t in tokens {
        at = match at {
            Yaml::Mapping(m) => m.get_mut(t.as_str())?,
            Yaml::Sequence(s) => s.get_mut(t.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(at)
}
