//! The tolerant decode itself: a strict decode first, then field by field on the wire, each
//! field repaired or left out alone.

use std::borrow::Cow;
use std::fmt;

use bytes::{Buf, BufMut};
use prost::{DecodeError, Message};

/// Nesting depth up to which a value is walked as protobuf (CRI's deepest strings are four
/// messages down; prost itself stops at 100).
const MAX_DEPTH: usize = 32;

/// Longest field-1 value reported as an object's ID.
const MAX_ID_BYTES: usize = 256;

/// What was done to a field so that its message decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Invalid UTF-8 inside it was replaced by U+FFFD; the field (the object) is kept.
    Replaced,
    /// It could not be repaired and was left out (for a List: that object).
    Dropped,
}

impl Action {
    /// The metric label: `replaced` or `dropped`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Replaced => "replaced",
            Self::Dropped => "dropped",
        }
    }
}

/// One repaired or dropped top-level field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    /// The field number in the decoded message (`items` of a List is 1).
    pub field: u32,
    /// The object's ID when the field is an object: field 1 of it, when that is a short string
    /// (every CRI object — `PodSandbox`, `Container` and their statuses — has its ID there).
    pub object_id: Option<String>,
    /// The pod UID of a dropped object, when its `io.kubernetes.pod.uid` label could still be
    /// read (kubelet labels every sandbox and container with it): what it could belong to.
    pub pod_uid: Option<String>,
    /// What prost said about the original field, with the path of message and field names
    /// (e.g. `ListPodSandboxResponse.items: PodSandbox.annotations: invalid string value: data
    /// is not UTF-8 encoded`).
    pub reason: String,
    /// What was done.
    pub action: Action,
}

impl fmt::Display for Repair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.action {
            Action::Replaced => "invalid UTF-8 replaced",
            Action::Dropped => "dropped",
        };
        match &self.object_id {
            Some(id) => write!(f, "object {id}: {what} ({})", self.reason),
            None => write!(f, "field {}: {what} ({})", self.field, self.reason),
        }
    }
}

/// A message and what it took to decode it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decoded<M> {
    /// The message.
    pub message: M,
    /// Fields repaired or dropped; empty for a well-formed message.
    pub repairs: Vec<Repair>,
}

impl<M> Decoded<M> {
    /// Whether some field (for a List: an object) is missing from [`Decoded::message`].
    pub fn dropped_any(&self) -> bool {
        self.repairs.iter().any(|r| r.action == Action::Dropped)
    }

    /// The IDs of the objects left out.
    pub fn dropped_ids(&self) -> impl Iterator<Item = &str> {
        self.repairs
            .iter()
            .filter(|r| r.action == Action::Dropped)
            .map(|r| r.object_id.as_deref().unwrap_or("?"))
    }
}

/// Decodes `buf` as `M`, repairing or dropping the top-level fields that a strict decode rejects
/// (see the module's documentation). Fails only when the message is not protobuf at all
/// (truncated, a bad length): then there is nothing to split.
pub fn decode<M, B>(buf: B) -> Result<Decoded<M>, DecodeError>
where
    M: Message + Default,
    B: Buf + Clone,
{
    let strict_err = match M::decode(buf.clone()) {
        Ok(message) => {
            return Ok(Decoded {
                message,
                repairs: Vec::new(),
            });
        }
        Err(e) => e,
    };
    let mut buf = buf;
    let bytes = buf.copy_to_bytes(buf.remaining());
    let Some(fields) = split(&bytes) else {
        return Err(strict_err);
    };
    let mut out = Vec::with_capacity(bytes.len());
    let mut repairs = Vec::new();
    for f in fields {
        let err = match M::decode(f.raw) {
            Ok(_) => {
                out.put_slice(f.raw);
                continue;
            }
            Err(e) => e,
        };
        let object_id = f.value.and_then(object_id);
        let pod_uid = f.value.and_then(pod_uid_label);
        let reason = reason(&err);
        let repaired = f
            .value
            .and_then(|v| repair(v, 0))
            .map(|v| encode_ld(f.number, &v))
            .filter(|raw| M::decode(&raw[..]).is_ok());
        let action = match repaired {
            Some(raw) => {
                out.put_slice(&raw);
                Action::Replaced
            }
            None => Action::Dropped,
        };
        repairs.push(Repair {
            field: f.number,
            object_id,
            pod_uid,
            reason,
            action,
        });
    }
    let message = M::decode(&out[..])?;
    Ok(Decoded { message, repairs })
}

/// prost's error text without its fixed prefix.
fn reason(e: &DecodeError) -> String {
    let s = e.to_string();
    s.strip_prefix("failed to decode Protobuf message: ")
        .map(str::to_owned)
        .unwrap_or(s)
}

/// One field on the wire.
struct Field<'a> {
    number: u32,
    /// The whole field: key and value.
    raw: &'a [u8],
    /// A length-delimited field's content.
    value: Option<&'a [u8]>,
}

/// Splits a message into its fields; `None` when the bytes are not a sequence of well-formed
/// fields (groups, wire types 3 and 4, are refused: proto3 has none).
fn split(bytes: &[u8]) -> Option<Vec<Field<'_>>> {
    let (fields, complete) = walk(bytes);
    complete.then_some(fields)
}

/// The well-formed fields at the start of `bytes`, and whether they are all of it.
fn walk(bytes: &[u8]) -> (Vec<Field<'_>>, bool) {
    let mut fields = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        match next_field(rest) {
            Some((f, r)) => {
                fields.push(f);
                rest = r;
            }
            None => return (fields, false),
        }
    }
    (fields, true)
}

fn next_field(start: &[u8]) -> Option<(Field<'_>, &[u8])> {
    let mut rest = start;
    let key = varint(&mut rest)?;
    let number = u32::try_from(key >> 3).ok().filter(|n| *n > 0)?;
    let value = match key & 7 {
        0 => {
            varint(&mut rest)?;
            None
        }
        1 => {
            rest = rest.get(8..)?;
            None
        }
        2 => {
            let len = usize::try_from(varint(&mut rest)?).ok()?;
            let v = rest.get(..len)?;
            rest = &rest[len..];
            Some(v)
        }
        5 => {
            rest = rest.get(4..)?;
            None
        }
        _ => return None,
    };
    let used = start.len() - rest.len();
    let field = Field {
        number,
        raw: &start[..used],
        value,
    };
    Some((field, rest))
}

/// A base-128 varint of at most 10 bytes. Written here because prost's own reader is not part of
/// its public API (`prost::encoding` is hidden and may change in any release).
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

fn encode_ld(number: u32, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 16);
    put_varint(&mut out, (u64::from(number) << 3) | 2);
    put_varint(&mut out, value.len() as u64);
    out.put_slice(value);
    out
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The repaired form of a length-delimited value, `None` when nothing in it needs repairing.
/// Valid UTF-8 is left alone whatever it is (a string, or a message whose strings are fine).
/// Otherwise: walkable as protobuf → each length-delimited value inside is repaired in turn;
/// not walkable → it is a string, made valid with U+FFFD.
fn repair(value: &[u8], depth: usize) -> Option<Vec<u8>> {
    if std::str::from_utf8(value).is_ok() {
        return None;
    }
    if depth < MAX_DEPTH
        && let Some(fields) = split(value)
    {
        let mut out = Vec::with_capacity(value.len() + 8);
        let mut changed = false;
        for f in fields {
            match f.value.and_then(|v| repair(v, depth + 1)) {
                Some(v) => {
                    out.extend_from_slice(&encode_ld(f.number, &v));
                    changed = true;
                }
                None => out.put_slice(f.raw),
            }
        }
        return changed.then_some(out);
    }
    match String::from_utf8_lossy(value) {
        Cow::Owned(s) => Some(s.into_bytes()),
        Cow::Borrowed(_) => None,
    }
}

/// Field 1 of `value` when it is a short valid string (a CRI object's ID), even when what
/// follows it is broken.
fn object_id(value: &[u8]) -> Option<String> {
    let f = walk(value).0.into_iter().find(|f| f.number == 1)?;
    let v = f
        .value
        .filter(|v| !v.is_empty() && v.len() <= MAX_ID_BYTES)?;
    std::str::from_utf8(v).ok().map(str::to_owned)
}

/// The value of the `io.kubernetes.pod.uid` entry of any map field at the top of `value` (a
/// map entry is a message of key 1 and value 2), when it is a short valid string — even when
/// the rest of the object is broken.
fn pod_uid_label(value: &[u8]) -> Option<String> {
    walk(value).0.into_iter().find_map(|f| {
        let entry = split(f.value?)?;
        let key = entry.iter().find(|e| e.number == 1)?.value?;
        if key != crate::labels::POD_UID.as_bytes() {
            return None;
        }
        let v = entry.iter().find(|e| e.number == 2)?.value?;
        let v = std::str::from_utf8(v).ok()?;
        (!v.is_empty() && v.len() <= MAX_ID_BYTES).then(|| v.to_owned())
    })
}

#[cfg(test)]
mod tests;
