use oci_spec::runtime::{LinuxSeccompArgBuilder, LinuxSeccompBuilder, LinuxSyscallBuilder};

use super::*;

fn insns(p: &Program) -> Vec<Insn> {
    p.bpf
        .chunks(8)
        .map(|c| Insn {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect()
}

fn profile(default: LinuxSeccompAction) -> LinuxSeccomp {
    LinuxSeccompBuilder::default()
        .default_action(default)
        .architectures(vec![
            Arch::ScmpArchX86_64,
            Arch::ScmpArchX86,
            Arch::ScmpArchX32,
        ])
        .syscalls(vec![
            LinuxSyscallBuilder::default()
                .names(vec![
                    "read".to_owned(),
                    "write".to_owned(),
                    "no_such_call".to_owned(),
                ])
                .action(LinuxSeccompAction::ScmpActAllow)
                .build()
                .expect("syscall"),
            LinuxSyscallBuilder::default()
                .names(vec!["personality".to_owned()])
                .action(LinuxSeccompAction::ScmpActAllow)
                .args(vec![
                    LinuxSeccompArgBuilder::default()
                        .index(0usize)
                        .value(0u64)
                        .op(LinuxSeccompOperator::ScmpCmpEq)
                        .build()
                        .expect("arg"),
                    LinuxSeccompArgBuilder::default()
                        .index(0usize)
                        .value(8u64)
                        .op(LinuxSeccompOperator::ScmpCmpEq)
                        .build()
                        .expect("arg"),
                ])
                .build()
                .expect("syscall"),
        ])
        .build()
        .expect("profile")
}

#[test]
fn errno_default_gets_runcs_enosys_stub_in_front() {
    let p = compile(&profile(LinuxSeccompAction::ScmpActErrno)).expect("compile");
    let i = insns(&p);
    assert_eq!(i[0], Insn::new(LD_W_ABS, 0, 0, 4), "loads the arch first");
    // x86-64 (+x32) and i386 sections: two arch comparisons.
    assert_eq!(i[1].code, JMP_JEQ_K);
    assert_eq!(i[1].k, AUDIT_ARCH_X86_64);
    assert_eq!(i[3].k, AUDIT_ARCH_I386);
    let enosys: Vec<_> = i
        .iter()
        .filter(|x| x.code == RET_K && x.k == SECCOMP_RET_ERRNO | ENOSYS)
        .collect();
    assert_eq!(
        enosys.len(),
        3,
        "x86-64, x32 and i386 each return ENOSYS past their last"
    );
    // x86-64's last named syscall is personality (135).
    assert!(i.iter().any(|x| x.code == JMP_JGT_K && x.k == 135));
    assert_eq!(p.flags, 0);
}

#[test]
fn allow_default_has_no_stub_and_notify_is_refused() {
    let p = compile(&profile(LinuxSeccompAction::ScmpActAllow)).expect("compile");
    assert!(!insns(&p).iter().any(|x| x.k == SECCOMP_RET_ERRNO | ENOSYS));
    let mut notify = profile(LinuxSeccompAction::ScmpActErrno);
    notify.set_default_action(LinuxSeccompAction::ScmpActNotify);
    assert!(matches!(
        compile(&notify),
        Err(SeccompError::Unsupported(_))
    ));
}

#[test]
fn stub_jumps_land_inside_the_program() {
    let p = compile(&profile(LinuxSeccompAction::ScmpActErrno)).expect("compile");
    let i = insns(&p);
    for (at, x) in i.iter().enumerate() {
        let targets: Vec<usize> = match x.code {
            JMP_JA => vec![at + 1 + x.k as usize],
            c if c & 0x07 == 0x05 => vec![at + 1 + x.jt as usize, at + 1 + x.jf as usize],
            _ => vec![],
        };
        for t in targets {
            assert!(
                t < i.len(),
                "jump at {at} to {t} past the end ({})",
                i.len()
            );
        }
    }
}
