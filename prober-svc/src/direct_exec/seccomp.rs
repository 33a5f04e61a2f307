//! The container's seccomp profile (`linux.seccomp` of its OCI spec) compiled to the classic BPF
//! program runc would load for `runc exec` (runc 1.1: `libcontainer/seccomp/seccomp_linux.go`
//! `InitSeccomp` + `patchbpf/enosys_linux.go`).
//!
//! The rules go through libseccomp, the library runc itself links, so syscall names resolve to the
//! same numbers for every architecture of the profile, with runc's choices: no_new_privs left to
//! the spec, binary-tree optimisation above 32 rules, a rule equal to the default action skipped,
//! unknown syscall names skipped, and several conditions on one argument split into one rule
//! each. Then runc's `-ENOSYS` stub goes in front: a syscall numbered above the highest one the
//! profile names (per architecture) returns `ENOSYS` instead of the default errno, so programs
//! built for newer kernels fall back as they do under runc (glibc's `clone3`, `fchmodat2`, ...).
//!
//! Compiled once per container in the prober; the helper only loads the bytes.

use std::io::{Read, Seek, SeekFrom};

use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};
use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompFilterFlag, LinuxSeccompOperator,
};

/// `SECCOMP_FILTER_FLAG_LOG`.
pub const FLAG_LOG: u32 = 1 << 1;
/// `SECCOMP_FILTER_FLAG_SPEC_ALLOW`.
pub const FLAG_SPEC_ALLOW: u32 = 1 << 2;

const EPERM: i32 = 1;
const ENOSYS: u32 = 38;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
/// `__X32_SYSCALL_BIT`: x32 syscalls share x86-64's audit arch and carry this bit.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
const AUDIT_ARCH_ARM: u32 = 0x4000_0028;

/// A compiled filter: `struct sock_filter` entries as the kernel takes them, and the flags for
/// `seccomp(SECCOMP_SET_MODE_FILTER)`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Program {
    /// `struct sock_filter[]`, native byte order (8 bytes each).
    pub bpf: Vec<u8>,
    /// `SECCOMP_FILTER_FLAG_*`.
    pub flags: u32,
}

/// Why a profile cannot be applied exactly as runc would.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum SeccompError {
    /// A feature runc supports through an agent or a process we do not reproduce.
    #[error("seccomp {0} is not reproduced by direct exec")]
    Unsupported(&'static str),
    /// libseccomp refused the profile (runc would refuse it too).
    #[error("seccomp profile: {0}")]
    Compile(String),
}

fn compile_err(e: impl std::fmt::Display) -> SeccompError {
    SeccompError::Compile(e.to_string())
}

/// runc's `getAction`: errno defaults to `EPERM`, trace's value too.
fn action(act: LinuxSeccompAction, errno_ret: Option<u32>) -> Result<ScmpAction, SeccompError> {
    let ret = |d: i32| errno_ret.map_or(d, |v| v as i32);
    Ok(match act {
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => {
            ScmpAction::KillThread
        }
        LinuxSeccompAction::ScmpActKillProcess => ScmpAction::KillProcess,
        LinuxSeccompAction::ScmpActTrap => ScmpAction::Trap,
        LinuxSeccompAction::ScmpActErrno => ScmpAction::Errno(ret(EPERM)),
        LinuxSeccompAction::ScmpActTrace => ScmpAction::Trace(ret(EPERM) as u16),
        LinuxSeccompAction::ScmpActLog => ScmpAction::Log,
        LinuxSeccompAction::ScmpActAllow => ScmpAction::Allow,
        LinuxSeccompAction::ScmpActNotify => {
            return Err(SeccompError::Unsupported(
                "SCMP_ACT_NOTIFY (a seccomp agent)",
            ));
        }
    })
}

fn arch(a: Arch) -> ScmpArch {
    match a {
        Arch::ScmpArchNative => ScmpArch::Native,
        Arch::ScmpArchX86 => ScmpArch::X86,
        Arch::ScmpArchX86_64 => ScmpArch::X8664,
        Arch::ScmpArchX32 => ScmpArch::X32,
        Arch::ScmpArchArm => ScmpArch::Arm,
        Arch::ScmpArchAarch64 => ScmpArch::Aarch64,
        Arch::ScmpArchMips => ScmpArch::Mips,
        Arch::ScmpArchMips64 => ScmpArch::Mips64,
        Arch::ScmpArchMips64n32 => ScmpArch::Mips64N32,
        Arch::ScmpArchMipsel => ScmpArch::Mipsel,
        Arch::ScmpArchMipsel64 => ScmpArch::Mipsel64,
        Arch::ScmpArchMipsel64n32 => ScmpArch::Mipsel64N32,
        Arch::ScmpArchPpc => ScmpArch::Ppc,
        Arch::ScmpArchPpc64 => ScmpArch::Ppc64,
        Arch::ScmpArchPpc64le => ScmpArch::Ppc64Le,
        Arch::ScmpArchS390 => ScmpArch::S390,
        Arch::ScmpArchS390x => ScmpArch::S390X,
        Arch::ScmpArchRiscv64 => ScmpArch::Riscv64,
    }
}

fn condition(index: u32, o: LinuxSeccompOperator, value: u64, value_two: u64) -> ScmpArgCompare {
    let (op, datum) = match o {
        LinuxSeccompOperator::ScmpCmpNe => (ScmpCompareOp::NotEqual, value),
        LinuxSeccompOperator::ScmpCmpLt => (ScmpCompareOp::Less, value),
        LinuxSeccompOperator::ScmpCmpLe => (ScmpCompareOp::LessOrEqual, value),
        LinuxSeccompOperator::ScmpCmpEq => (ScmpCompareOp::Equal, value),
        LinuxSeccompOperator::ScmpCmpGe => (ScmpCompareOp::GreaterEqual, value),
        LinuxSeccompOperator::ScmpCmpGt => (ScmpCompareOp::Greater, value),
        // runc passes (value, valueTwo): `(arg & value) == valueTwo`.
        LinuxSeccompOperator::ScmpCmpMaskedEq => (ScmpCompareOp::MaskedEqual(value), value_two),
    };
    ScmpArgCompare::new(index, op, datum)
}

/// Compiles `profile` as runc does for an exec'd process.
///
/// One piece on purpose: it is runc's `libseccomp` calls in runc's order (refusals, default
/// action, architectures, rules, attributes, then the stub in front of the exported program),
/// which is what the comparison with runc's own programs checks, read top to bottom.
pub fn compile(profile: &LinuxSeccomp) -> Result<Program, SeccompError> {
    if profile.listener_path().is_some() {
        return Err(SeccompError::Unsupported("listenerPath (a seccomp agent)"));
    }
    let default = action(profile.default_action(), profile.default_errno_ret())?;
    let mut filter = ScmpFilterContext::new(default).map_err(compile_err)?;
    let mut archs = vec![ScmpArch::native()];
    for a in profile.architectures().iter().flatten() {
        let a = arch(*a);
        filter.add_arch(a).map_err(compile_err)?;
        if !archs.contains(&a) {
            archs.push(a);
        }
    }
    let mut flags = 0;
    for f in profile.flags().iter().flatten() {
        match f {
            LinuxSeccompFilterFlag::SeccompFilterFlagLog => {
                filter.set_ctl_log(true).map_err(compile_err)?;
                flags |= FLAG_LOG;
            }
            LinuxSeccompFilterFlag::SeccompFilterFlagSpecAllow => {
                filter.set_ctl_ssb(true).map_err(compile_err)?;
                flags |= FLAG_SPEC_ALLOW;
            }
            // runc accepts TSYNC and does nothing with it: its init is one thread when it loads.
            LinuxSeccompFilterFlag::SeccompFilterFlagTsync => {}
        }
    }
    let syscalls = profile.syscalls().clone().unwrap_or_default();
    let rules: usize = syscalls.iter().map(|s| s.names().len()).sum();
    if rules > 32 {
        // libseccomp <= 2.5.4 misbehaves with the tree and no rules; runc's threshold.
        let _ = filter.set_ctl_optimize(2);
    }
    filter.set_ctl_nnp(false).map_err(compile_err)?;
    let mut names: Vec<&str> = Vec::new();
    for call in &syscalls {
        let act = action(call.action(), call.errno_ret())?;
        if act == default {
            continue;
        }
        let args = call.args().clone().unwrap_or_default();
        let conds: Vec<ScmpArgCompare> = args
            .iter()
            .map(|a| {
                condition(
                    a.index() as u32,
                    a.op(),
                    a.value(),
                    a.value_two().unwrap_or(0),
                )
            })
            .collect();
        let mut counts = [0u8; 6];
        for a in &args {
            if let Some(c) = counts.get_mut(a.index()) {
                *c += 1;
            }
        }
        let split = counts.iter().any(|c| *c > 1);
        for name in call.names() {
            let Ok(nr) = ScmpSyscall::from_name(name) else {
                // runc: "unknown seccomp syscall ignored" (not in this kernel's table).
                continue;
            };
            names.push(name);
            if conds.is_empty() {
                filter.add_rule(act, nr).map_err(compile_err)?;
            } else if split {
                for c in &conds {
                    filter
                        .add_rule_conditional(act, nr, &[*c])
                        .map_err(compile_err)?;
                }
            } else {
                filter
                    .add_rule_conditional(act, nr, &conds)
                    .map_err(compile_err)?;
            }
        }
    }
    let mut body = export(&filter)?;
    let stub = if profile.default_errno_ret() == Some(ENOSYS)
        || default == ScmpAction::Allow
        || default == ScmpAction::Log
    {
        Vec::new()
    } else {
        enosys_stub(&last_syscalls(&archs, &names), body.len() / 8)
    };
    let mut bpf = Vec::with_capacity(stub.len() * 8 + body.len());
    for i in &stub {
        bpf.extend_from_slice(&i.to_bytes());
    }
    bpf.append(&mut body);
    Ok(Program { bpf, flags })
}

/// libseccomp's program, through a memfd (`seccomp_export_bpf_mem` is libseccomp 2.6).
pub(crate) fn export(filter: &ScmpFilterContext) -> Result<Vec<u8>, SeccompError> {
    let fd = nix::sys::memfd::memfd_create(c"seccomp", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .map_err(compile_err)?;
    filter.export_bpf(&fd).map_err(compile_err)?;
    let mut f = std::fs::File::from(fd);
    f.seek(SeekFrom::Start(0)).map_err(compile_err)?;
    let mut out = Vec::new();
    f.read_to_end(&mut out).map_err(compile_err)?;
    if out.is_empty() || out.len() % 8 != 0 {
        return Err(SeccompError::Compile(format!(
            "exported {} bytes of BPF",
            out.len()
        )));
    }
    Ok(out)
}

/// Per audit arch (x32 apart), the highest syscall number the profile names.
fn last_syscalls(archs: &[ScmpArch], names: &[&str]) -> Vec<(ScmpArch, u32)> {
    let mut out = Vec::new();
    for a in archs {
        let last = names
            .iter()
            .filter_map(|n| ScmpSyscall::from_name_by_arch(n, *a).ok())
            .map(|s| s.as_raw_syscall())
            .filter(|n| *n >= 0)
            .max();
        if let Some(last) = last {
            out.push((*a, last as u32));
        }
    }
    out
}

/// One classic BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const LD_W_ABS: u16 = 0x20;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGT_K: u16 = 0x25;
const JMP_JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

impl Insn {
    const fn new(code: u16, jt: u8, jf: u8, k: u32) -> Self {
        Self { code, jt, jf, k }
    }
    fn to_bytes(self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..2].copy_from_slice(&self.code.to_ne_bytes());
        b[2] = self.jt;
        b[3] = self.jf;
        b[4..].copy_from_slice(&self.k.to_ne_bytes());
        b
    }
}

fn audit_arch(a: ScmpArch) -> Option<u32> {
    Some(match a {
        ScmpArch::X8664 | ScmpArch::X32 => AUDIT_ARCH_X86_64,
        ScmpArch::X86 => AUDIT_ARCH_I386,
        ScmpArch::Aarch64 => AUDIT_ARCH_AARCH64,
        ScmpArch::Arm => AUDIT_ARCH_ARM,
        ScmpArch::Native => return audit_arch(ScmpArch::native()),
        _ => return None,
    })
}

/// runc's `-ENOSYS` stub: for each audit arch of the profile, a syscall above the last one the
/// profile knows returns `ENOSYS`; everything else falls through to libseccomp's program, which
/// follows the stub. `_body_len` documents that the body is appended right after.
///
/// One piece on purpose: classic BPF jumps are relative instruction counts, so each jump here
/// is counted over the whole stub as it is laid out; split, every part would need the lengths of
/// the parts after it.
fn enosys_stub(last: &[(ScmpArch, u32)], _body_len: usize) -> Vec<Insn> {
    // Group x86-64 and x32 (one audit arch, told apart by the x32 bit).
    let mut sections: Vec<(u32, Option<u32>, Option<u32>)> = Vec::new(); // (audit, plain, x32)
    for (a, n) in last {
        let Some(audit) = audit_arch(*a) else {
            continue;
        };
        let x32 =
            *a == ScmpArch::X32 || (*a == ScmpArch::Native && ScmpArch::native() == ScmpArch::X32);
        let entry = match sections.iter_mut().find(|s| s.0 == audit) {
            Some(e) => e,
            None => {
                sections.push((audit, None, None));
                sections.last_mut().expect("just pushed")
            }
        };
        let slot = if x32 { &mut entry.2 } else { &mut entry.1 };
        *slot = Some(slot.map_or(*n, |m| m.max(*n)));
    }
    if sections.is_empty() {
        return Vec::new();
    }
    // Each section's code, ending with "continue to the filter" (patched below).
    let enosys = Insn::new(RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS);
    let mut bodies: Vec<Vec<Insn>> = Vec::new();
    for (audit, plain, x32) in &sections {
        let mut s = vec![Insn::new(LD_W_ABS, 0, 0, 0)];
        // `jgt last → ENOSYS` as: jgt k, jt=0 (next: ret ENOSYS), jf=1 (skip it).
        let check = |last: u32| [Insn::new(JMP_JGT_K, 0, 1, last), enosys];
        if *audit == AUDIT_ARCH_X86_64 {
            match (plain, x32) {
                (Some(p), Some(x)) => {
                    // jset x32 → x32 check (skip the plain check and its jump).
                    s.push(Insn::new(JMP_JSET_K, 3, 0, X32_SYSCALL_BIT));
                    s.extend(check(*p));
                    s.push(Insn::new(JMP_JA, 0, 0, 2)); // over the x32 check to the exit
                    s.extend(check(*x));
                }
                (Some(p), None) => {
                    // x32 calls are left to libseccomp (bad arch for this filter).
                    s.push(Insn::new(JMP_JSET_K, 2, 0, X32_SYSCALL_BIT));
                    s.extend(check(*p));
                }
                (None, Some(x)) => {
                    s.push(Insn::new(JMP_JSET_K, 0, 2, X32_SYSCALL_BIT));
                    s.extend(check(*x));
                }
                (None, None) => {}
            }
        } else if let Some(p) = plain.or(*x32) {
            s.extend(check(p));
        }
        s.push(Insn::new(JMP_JA, 0, 0, 0)); // → filter start, patched
        bodies.push(s);
    }
    // Dispatch: ld arch; for each section `jeq audit, jt → ja section, jf → next`; then ja filter.
    let n = sections.len();
    let dispatch_len = 1 + 2 * n + 1;
    let mut out = vec![Insn::new(LD_W_ABS, 0, 0, 4)];
    let mut section_start = dispatch_len;
    let starts: Vec<usize> = bodies
        .iter()
        .map(|b| {
            let s = section_start;
            section_start += b.len();
            s
        })
        .collect();
    let total = section_start;
    for (i, (audit, _, _)) in sections.iter().enumerate() {
        out.push(Insn::new(JMP_JEQ_K, 0, 1, *audit));
        let at = out.len();
        out.push(Insn::new(JMP_JA, 0, 0, (starts[i] - at - 1) as u32));
    }
    let at = out.len();
    out.push(Insn::new(JMP_JA, 0, 0, (total - at - 1) as u32));
    for b in bodies {
        let len = b.len();
        for (j, mut insn) in b.into_iter().enumerate() {
            if j == len - 1 {
                let at = out.len();
                insn.k = (total - at - 1) as u32;
            }
            out.push(insn);
        }
    }
    out
}

#[cfg(test)]
mod tests;
