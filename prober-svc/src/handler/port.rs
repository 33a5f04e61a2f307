//! Port resolution as kubelet's `ResolveContainerPort`, against the container's declared ports
//! ([`ContainerPort`], from the annotation kubelet writes on every container it creates).

use crate::model::container_port::ContainerPort;
use crate::spec::PortRef;

/// Why a port could not be used. The `Display` strings are kubelet's (Go's `strconv.Atoi` and
/// `invalid port number` errors), since they end up in "probe errored" messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// A name that is neither a declared port nor a number.
    #[error("strconv.Atoi: parsing {0:?}: invalid syntax")]
    Syntax(String),
    /// A number too large for Go's `int`.
    #[error("strconv.Atoi: parsing {0:?}: value out of range")]
    Range(String),
    /// A number outside 1..=65535.
    #[error("invalid port number: {0}")]
    Invalid(i64),
}

/// `ResolveContainerPort`: a number is used as is; a name is looked up among the container's own
/// ports, then, as kubelet's "last ditch effort", parsed as a decimal number. The result must be
/// in 1..=65535.
pub fn resolve_port(port: &PortRef, ports: &[ContainerPort]) -> Result<u16, PortError> {
    let n: i64 = match port {
        PortRef::Number(n) => (*n).into(),
        PortRef::Name(name) => match ports.iter().find(|p| p.name == *name) {
            Some(p) => p.container_port.into(),
            None => go_atoi(name)?,
        },
    };
    match u16::try_from(n) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(PortError::Invalid(n)),
    }
}

/// Go's `strconv.Atoi` on a 64-bit platform: optional sign, ASCII digits only.
fn go_atoi(s: &str) -> Result<i64, PortError> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PortError::Syntax(s.to_owned()));
    }
    s.strip_prefix('+')
        .unwrap_or(s)
        .parse::<i64>()
        .map_err(|_| PortError::Range(s.to_owned()))
}
