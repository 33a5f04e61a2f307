//! A CRI message cut down on the wire to what the index keeps, before prost sees it.
//!
//! The walk reads each field's key and either copies the field (re-encoded as it came), goes
//! into it (a nested message, a map entry, an environment variable), or skips its bytes
//! without reading them. What comes out is a small message of the same type, decoded by the
//! usual (tolerant) decoder. A message that is not protobuf is refused whole, as prost would.
//!
//! The shapes below name CRI's field numbers (`k8s-cri`'s `v1.proto`); a field they do not
//! name is skipped.

use std::collections::BTreeSet;

use bytes::{Buf, BufMut};
use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};

use super::{
    ENV_BYTES, KEY_BYTES, MAPS_BYTES, NAME_BYTES, PROBES_BYTES, TEXT_BYTES, annotation_bound,
    label_bound,
};

/// What to do with one field.
#[derive(Clone, Copy, Debug)]
pub enum Field {
    /// Copy it as it is (numbers, enums).
    Keep,
    /// A string or bytes, kept up to this many bytes; past it left out (truncated).
    Capped(usize),
    /// A nested message, cut down to its shape.
    Msg(Shape),
    /// A nested message that is one index entry: truncation inside it is reported with its ID
    /// (its field 1).
    Object(Shape),
    /// A `map<string, string>` of labels.
    Labels,
    /// A `map<string, string>` of annotations.
    Annotations,
    /// A `repeated KeyValue` environment.
    Env,
}

/// The fields of a message that are kept, by number.
pub type Shape = &'static [(u32, Field)];

const SANDBOX_METADATA: Shape = &[
    (1, Field::Capped(NAME_BYTES)),
    (2, Field::Capped(NAME_BYTES)),
    (3, Field::Capped(NAME_BYTES)),
    (4, Field::Keep),
];
const CONTAINER_METADATA: Shape = &[(1, Field::Capped(NAME_BYTES)), (2, Field::Keep)];
const IMAGE_SPEC: Shape = &[(1, Field::Capped(TEXT_BYTES))];
const NAMESPACE_OPTION: Shape = &[(1, Field::Keep)];
const SANDBOX_SECURITY: Shape = &[(1, Field::Msg(NAMESPACE_OPTION))];
const LINUX_SANDBOX_CONFIG: Shape = &[(2, Field::Msg(SANDBOX_SECURITY))];
const POD_SANDBOX_CONFIG: Shape = &[
    (1, Field::Msg(SANDBOX_METADATA)),
    (6, Field::Labels),
    (7, Field::Annotations),
    (8, Field::Msg(LINUX_SANDBOX_CONFIG)),
];
const CONTAINER_CONFIG: Shape = &[
    (1, Field::Msg(CONTAINER_METADATA)),
    (2, Field::Msg(IMAGE_SPEC)),
    (6, Field::Env),
    (9, Field::Labels),
    (10, Field::Annotations),
];
const POD_SANDBOX: Shape = &[
    (1, Field::Capped(NAME_BYTES)),
    (2, Field::Msg(SANDBOX_METADATA)),
    (3, Field::Keep),
    (4, Field::Keep),
    (5, Field::Labels),
    (6, Field::Annotations),
    (7, Field::Capped(NAME_BYTES)),
];
const CONTAINER: Shape = &[
    (1, Field::Capped(NAME_BYTES)),
    (2, Field::Capped(NAME_BYTES)),
    (3, Field::Msg(CONTAINER_METADATA)),
    (4, Field::Msg(IMAGE_SPEC)),
    (6, Field::Keep),
    (7, Field::Keep),
    (8, Field::Labels),
    (9, Field::Annotations),
];
const POD_IP: Shape = &[(1, Field::Capped(NAME_BYTES))];
const SANDBOX_NETWORK: Shape = &[(1, Field::Capped(NAME_BYTES)), (2, Field::Msg(POD_IP))];
const NAMESPACE: Shape = &[(2, Field::Msg(NAMESPACE_OPTION))];
const LINUX_SANDBOX_STATUS: Shape = &[(1, Field::Msg(NAMESPACE))];
const POD_SANDBOX_STATUS: Shape = &[
    (1, Field::Capped(NAME_BYTES)),
    (2, Field::Msg(SANDBOX_METADATA)),
    (3, Field::Keep),
    (4, Field::Keep),
    (5, Field::Msg(SANDBOX_NETWORK)),
    (6, Field::Msg(LINUX_SANDBOX_STATUS)),
    (7, Field::Labels),
    (8, Field::Annotations),
    (9, Field::Capped(NAME_BYTES)),
];
const CONTAINER_STATUS: Shape = &[
    (1, Field::Capped(NAME_BYTES)),
    (2, Field::Msg(CONTAINER_METADATA)),
    (3, Field::Keep),
    (4, Field::Keep),
    (5, Field::Keep),
    (6, Field::Keep),
    (7, Field::Keep),
    (8, Field::Msg(IMAGE_SPEC)),
    (10, Field::Capped(TEXT_BYTES)),
    (11, Field::Capped(TEXT_BYTES)),
    (12, Field::Labels),
    (13, Field::Annotations),
];

/// `RunPodSandboxRequest`: the config's metadata, kept labels and annotations, network mode;
/// the runtime handler.
pub const RUN_POD_SANDBOX_REQUEST: Shape = &[
    (1, Field::Msg(POD_SANDBOX_CONFIG)),
    (2, Field::Capped(NAME_BYTES)),
];
/// `CreateContainerRequest`: the sandbox ID and the config's metadata, image, kept labels,
/// annotations and environment (the sandbox config is read apart, for the probes' names).
pub const CREATE_CONTAINER_REQUEST: Shape = &[
    (1, Field::Capped(NAME_BYTES)),
    (2, Field::Msg(CONTAINER_CONFIG)),
];
/// `CreateContainerRequest.sandbox_config`'s annotations only (for the pod's probes).
pub const CREATE_CONTAINER_SANDBOX_ANNOTATIONS: Shape =
    &[(3, Field::Msg(&[(7, Field::Annotations)]))];
/// `ListPodSandboxResponse`.
pub const LIST_POD_SANDBOX_RESPONSE: Shape = &[(1, Field::Object(POD_SANDBOX))];
/// `ListContainersResponse`.
pub const LIST_CONTAINERS_RESPONSE: Shape = &[(1, Field::Object(CONTAINER))];
/// `PodSandboxStatusResponse` without the verbose `info`.
pub const POD_SANDBOX_STATUS_RESPONSE: Shape = &[(1, Field::Object(POD_SANDBOX_STATUS))];
/// `ContainerStatusResponse` without the verbose `info`.
pub const CONTAINER_STATUS_RESPONSE: Shape = &[(1, Field::Object(CONTAINER_STATUS))];

/// The message cut down.
#[derive(Debug, Default)]
pub struct Pruned {
    /// Its encoding: the kept fields, in the order they came.
    pub bytes: Vec<u8>,
    /// Whether any kept field was past its bound.
    pub truncated: bool,
    /// The IDs of the index entries ([`Field::Object`]) that had a field past its bound.
    pub truncated_ids: Vec<String>,
}

/// Why a message could not be walked.
#[derive(Debug, thiserror::Error)]
#[error("not a protobuf message: {0}")]
pub struct NotProtobuf(&'static str);

/// Cuts `buf` down to `shape`, keeping of the environment only the variables in `env`.
pub fn prune(
    mut buf: impl Buf,
    shape: Shape,
    env: &BTreeSet<String>,
) -> Result<Pruned, NotProtobuf> {
    let mut walk = Walk {
        env,
        out: Pruned::default(),
        maps_used: 0,
        env_used: 0,
        entry_truncated: false,
    };
    let mut bytes = Vec::new();
    walk.message(&mut buf, shape, &mut bytes, 0)?;
    walk.out.bytes = bytes;
    walk.out.truncated |= walk.entry_truncated;
    Ok(walk.out)
}

/// The value of the map entry `key` in the map field `tag` of `buf` (e.g. a verbose status's
/// `info`), read without decoding the rest.
pub fn map_value(mut buf: impl Buf, tag: u32, key: &str) -> Result<Option<Vec<u8>>, NotProtobuf> {
    while buf.has_remaining() {
        let (t, wt) = decode_key(&mut buf).map_err(|_| NotProtobuf("field key"))?;
        if t != tag || wt != WireType::LengthDelimited {
            skip(&mut buf, wt)?;
            continue;
        }
        let len = length(&mut buf)?;
        let mut entry = (&mut buf).take(len);
        let mut found_key = None;
        let mut value = None;
        while entry.has_remaining() {
            let (t, wt) = decode_key(&mut entry).map_err(|_| NotProtobuf("map key"))?;
            match (t, wt) {
                (1, WireType::LengthDelimited) => found_key = Some(bytes_of(&mut entry)?),
                (2, WireType::LengthDelimited) => value = Some(bytes_of(&mut entry)?),
                _ => skip(&mut entry, wt)?,
            }
        }
        if found_key.as_deref() == Some(key.as_bytes()) {
            return Ok(Some(value.unwrap_or_default()));
        }
    }
    Ok(None)
}

/// Deepest nesting walked (CRI's kept fields are four messages down).
const MAX_DEPTH: usize = 16;

struct Walk<'a> {
    env: &'a BTreeSet<String>,
    out: Pruned,
    /// Label and annotation bytes kept in the current entry.
    maps_used: usize,
    /// Environment bytes kept in the current entry.
    env_used: usize,
    /// Whether the current entry had a field past its bound.
    entry_truncated: bool,
}

impl Walk<'_> {
    fn message(
        &mut self,
        buf: &mut dyn Buf,
        shape: Shape,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), NotProtobuf> {
        if depth > MAX_DEPTH {
            return Err(NotProtobuf("nested too deep"));
        }
        while buf.has_remaining() {
            let (tag, wt) = field_key(buf)?;
            match shape.iter().find(|(t, _)| *t == tag) {
                None => skip(buf, wt)?,
                Some(&(_, field)) => self.field(buf, tag, wt, field, out, depth)?,
            }
        }
        Ok(())
    }

    fn field(
        &mut self,
        buf: &mut dyn Buf,
        tag: u32,
        wt: WireType,
        field: Field,
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<(), NotProtobuf> {
        if !matches!(field, Field::Keep) && wt != WireType::LengthDelimited {
            // Not what CRI declares: prost would refuse it; leave it to prost.
            return copy(buf, tag, wt, out);
        }
        match field {
            Field::Keep => copy(buf, tag, wt, out),
            Field::Capped(max) => {
                let len = length(buf)?;
                if len > max {
                    self.entry_truncated = true;
                    advance(buf, len)
                } else {
                    put_bytes(out, tag, &take(buf, len)?);
                    Ok(())
                }
            }
            Field::Msg(shape) => {
                let len = length(buf)?;
                let mut inner = Vec::new();
                self.message(&mut (&mut *buf).take(len), shape, &mut inner, depth + 1)?;
                put_bytes(out, tag, &inner);
                Ok(())
            }
            Field::Object(shape) => {
                let len = length(buf)?;
                let outer = (self.maps_used, self.env_used, self.entry_truncated);
                (self.maps_used, self.env_used, self.entry_truncated) = (0, 0, false);
                let mut inner = Vec::new();
                self.message(&mut (&mut *buf).take(len), shape, &mut inner, depth + 1)?;
                if self.entry_truncated {
                    self.out.truncated = true;
                    self.out.truncated_ids.push(id_of(&inner));
                }
                (self.maps_used, self.env_used, self.entry_truncated) = outer;
                put_bytes(out, tag, &inner);
                Ok(())
            }
            Field::Labels => self.map_entry(buf, tag, out, label_bound),
            Field::Annotations => self.map_entry(buf, tag, out, annotation_bound),
            Field::Env => self.env_entry(buf, tag, out),
        }
    }

    /// One `map<string, string>` entry, kept when `bound` names its key and the value and the
    /// entry's budget allow.
    fn map_entry(
        &mut self,
        buf: &mut dyn Buf,
        tag: u32,
        out: &mut Vec<u8>,
        bound: fn(&[u8]) -> Option<usize>,
    ) -> Result<(), NotProtobuf> {
        let len = length(buf)?;
        let mut entry = (&mut *buf).take(len);
        let (key, value, too_long) = pair(&mut entry, PROBES_BYTES)?;
        let Some(max) = key.as_deref().and_then(bound) else {
            return Ok(());
        };
        let key = key.unwrap_or_default();
        let value = value.unwrap_or_default();
        let size = key.len() + value.len();
        if too_long || value.len() > max || self.maps_used + size > MAPS_BYTES {
            self.entry_truncated = true;
            return Ok(());
        }
        self.maps_used += size;
        put_pair(out, tag, &key, &value);
        Ok(())
    }

    /// One environment variable, kept when its name is in `env` and the entry's budget allows.
    fn env_entry(
        &mut self,
        buf: &mut dyn Buf,
        tag: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), NotProtobuf> {
        let len = length(buf)?;
        if self.env.is_empty() {
            return advance(buf, len);
        }
        let mut entry = (&mut *buf).take(len);
        let (key, value, too_long) = pair(&mut entry, ENV_BYTES)?;
        let Some(key) =
            key.filter(|k| std::str::from_utf8(k).is_ok_and(|name| self.env.contains(name)))
        else {
            return Ok(());
        };
        let value = value.unwrap_or_default();
        let size = key.len() + value.len();
        if too_long || self.env_used + size > ENV_BYTES {
            self.entry_truncated = true;
            return Ok(());
        }
        self.env_used += size;
        put_pair(out, tag, &key, &value);
        Ok(())
    }
}

/// A key/value entry as read: its key (when no longer than [`KEY_BYTES`]), its value (when no
/// longer than the bound asked for), and whether the value was longer.
type Pair = (Option<Vec<u8>>, Option<Vec<u8>>, bool);

/// A key/value entry's key and value (see [`Pair`]), the rest of its bytes skipped.
fn pair(entry: &mut dyn Buf, max_value: usize) -> Result<Pair, NotProtobuf> {
    let (mut key, mut value, mut too_long) = (None, None, false);
    let mut key_too_long = false;
    while entry.has_remaining() {
        let (t, wt) = field_key(entry)?;
        match (t, wt) {
            (1 | 2, WireType::LengthDelimited) => {
                let len = length(entry)?;
                let max = if t == 1 { KEY_BYTES } else { max_value };
                if len > max {
                    advance(entry, len)?;
                    if t == 1 {
                        key_too_long = true;
                    } else {
                        too_long = true;
                    }
                } else if t == 1 {
                    key = Some(take(entry, len)?);
                } else {
                    value = Some(take(entry, len)?);
                }
            }
            _ => skip(entry, wt)?,
        }
    }
    if key_too_long {
        // No kept key is that long: the entry is not one of ours.
        key = None;
    }
    Ok((key, value, too_long))
}

/// Field 1 of an encoded object, as a string (its ID); empty when absent.
fn id_of(mut msg: &[u8]) -> String {
    while msg.has_remaining() {
        let Ok((t, wt)) = decode_key(&mut msg) else {
            break;
        };
        if t == 1 && wt == WireType::LengthDelimited {
            return bytes_of(&mut msg)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
        }
        if skip(&mut msg, wt).is_err() {
            break;
        }
    }
    String::new()
}

fn field_key(mut buf: &mut dyn Buf) -> Result<(u32, WireType), NotProtobuf> {
    decode_key(&mut buf).map_err(|_| NotProtobuf("field key"))
}

fn varint(mut buf: &mut dyn Buf) -> Result<u64, prost::DecodeError> {
    decode_varint(&mut buf)
}

fn length(buf: &mut dyn Buf) -> Result<usize, NotProtobuf> {
    let len = varint(buf).map_err(|_| NotProtobuf("length"))?;
    let len = usize::try_from(len).map_err(|_| NotProtobuf("length"))?;
    if len > buf.remaining() {
        return Err(NotProtobuf("length past the end"));
    }
    Ok(len)
}

fn advance(buf: &mut dyn Buf, len: usize) -> Result<(), NotProtobuf> {
    if len > buf.remaining() {
        return Err(NotProtobuf("field past the end"));
    }
    buf.advance(len);
    Ok(())
}

fn take(buf: &mut dyn Buf, len: usize) -> Result<Vec<u8>, NotProtobuf> {
    if len > buf.remaining() {
        return Err(NotProtobuf("field past the end"));
    }
    let mut v = vec![0; len];
    buf.copy_to_slice(&mut v);
    Ok(v)
}

fn bytes_of(buf: &mut dyn Buf) -> Result<Vec<u8>, NotProtobuf> {
    let len = length(buf)?;
    take(buf, len)
}

/// Skips one field's value.
fn skip(buf: &mut dyn Buf, wt: WireType) -> Result<(), NotProtobuf> {
    match wt {
        WireType::Varint => varint(buf).map(|_| ()).map_err(|_| NotProtobuf("varint")),
        WireType::SixtyFourBit => advance(buf, 8),
        WireType::ThirtyTwoBit => advance(buf, 4),
        WireType::LengthDelimited => {
            let len = length(buf)?;
            advance(buf, len)
        }
        WireType::StartGroup | WireType::EndGroup => Err(NotProtobuf("group")),
    }
}

/// Copies one field as it came.
fn copy(buf: &mut dyn Buf, tag: u32, wt: WireType, out: &mut Vec<u8>) -> Result<(), NotProtobuf> {
    match wt {
        WireType::Varint => {
            let v = varint(buf).map_err(|_| NotProtobuf("varint"))?;
            encode_key(tag, wt, out);
            encode_varint(v, out);
            Ok(())
        }
        WireType::SixtyFourBit | WireType::ThirtyTwoBit => {
            let n = if wt == WireType::SixtyFourBit { 8 } else { 4 };
            let v = take(buf, n)?;
            encode_key(tag, wt, out);
            out.put_slice(&v);
            Ok(())
        }
        WireType::LengthDelimited => {
            let v = bytes_of(buf)?;
            put_bytes(out, tag, &v);
            Ok(())
        }
        WireType::StartGroup | WireType::EndGroup => Err(NotProtobuf("group")),
    }
}

fn put_bytes(out: &mut Vec<u8>, tag: u32, v: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(v.len() as u64, out);
    out.put_slice(v);
}

fn put_pair(out: &mut Vec<u8>, tag: u32, key: &[u8], value: &[u8]) {
    let mut entry = Vec::with_capacity(key.len() + value.len() + 12);
    put_bytes(&mut entry, 1, key);
    put_bytes(&mut entry, 2, value);
    put_bytes(out, tag, &entry);
}

#[cfg(test)]
mod tests;
