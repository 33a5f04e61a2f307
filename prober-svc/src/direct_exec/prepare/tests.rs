use super::*;

#[test]
fn limits_parse_in_kernel_order() {
    let text = "\
Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max file size             unlimited            unlimited            bytes     
Max data size             unlimited            unlimited            bytes     
Max stack size            8388608              unlimited            bytes     
Max core file size        0                    unlimited            bytes     
Max resident set          unlimited            unlimited            bytes     
Max processes             96365                96365                processes 
Max open files            20000                20000                files     
Max locked memory         8388608              8388608              bytes     
Max address space         unlimited            unlimited            bytes     
Max file locks            unlimited            unlimited            locks     
Max pending signals       96365                96365                signals   
Max msgqueue size         819200               819200               bytes     
Max nice priority         0                    0                    
Max realtime priority     0                    0                    
Max realtime timeout      unlimited            unlimited            us        
";
    let l = parse_limits(text);
    assert_eq!(l.len(), 16);
    assert_eq!(
        l[3],
        Rlimit {
            resource: 3,
            soft: 8_388_608,
            hard: u64::MAX
        }
    );
    assert_eq!(
        l[7],
        Rlimit {
            resource: 7,
            soft: 20_000,
            hard: 20_000
        }
    );
    assert_eq!(l[15].resource, 15);
}

#[test]
fn env_keeps_first_place_and_last_value_like_os_setenv() {
    let env: Vec<String> = ["A=1", "B=2", "A=3", "C=x=y"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        normalize_env(env.iter()).expect("valid"),
        vec!["A=3", "B=2", "C=x=y"]
    );
    let bad = ["NOEQUALS".to_owned()];
    assert!(normalize_env(bad.iter()).is_err());
}

fn info(spec: serde_json::Value, runtime: &str) -> String {
    serde_json::json!({"pid": 1, "runtimeType": runtime, "runtimeSpec": spec}).to_string()
}

#[test]
fn vm_runtimes_user_namespaces_and_unknown_fields_are_refused() {
    let host = Host::default();
    let spec = serde_json::json!({"ociVersion": "1.0.2", "process": {"user": {"uid": 0, "gid": 0}, "cwd": "/"}, "linux": {}});
    assert!(matches!(
        prepare("c", &info(spec.clone(), "io.containerd.kata.v2"), &host),
        Err(Refusal::Runtime(r)) if r == "io.containerd.kata.v2"
    ));
    let mut userns = spec.clone();
    userns["linux"]["namespaces"] = serde_json::json!([{"type": "user"}]);
    assert_eq!(
        prepare("c", &info(userns, "io.containerd.runc.v2"), &host),
        Err(Refusal::UserNamespace)
    );
    for (path, field) in [
        (&["process", "ioPriority"][..], "process.ioPriority"),
        (&["process", "selinuxLabel"][..], "process.selinuxLabel"),
        (&["linux", "personality"][..], "linux.personality"),
        (&["linux", "uidMappings"][..], "linux.uidMappings"),
    ] {
        let mut s = spec.clone();
        s[path[0]][path[1]] = serde_json::json!("x");
        assert_eq!(
            prepare("c", &info(s, "io.containerd.runc.v2"), &host),
            Err(Refusal::Field(field.to_owned())),
            "{field}"
        );
    }
    let mut tty = spec;
    tty["process"]["terminal"] = serde_json::json!(true);
    assert_eq!(
        prepare("c", &info(tty, "io.containerd.runc.v2"), &host),
        Err(Refusal::Field("process.terminal".to_owned()))
    );
}

#[test]
fn an_init_whose_cgroups_do_not_name_the_container_is_refused() {
    let id = "0123abcd";
    let cgroupfs = "4:memory:/kubepods/pod1/0123abcd\n2:misc:/\n0::/kubepods/pod1/0123abcd\n";
    assert_eq!(check_cgroups_name(id, cgroupfs), Ok(()));
    let systemd = "0::/kubepods.slice/cri-containerd-0123abcd.scope\n";
    assert_eq!(check_cgroups_name(id, systemd), Ok(()));
    // Another container's process, a process at the root of every hierarchy.
    assert!(check_cgroups_name(id, "0::/kubepods/pod1/ffff\n").is_err());
    assert!(check_cgroups_name(id, "4:memory:/\n0::/\n").is_err());
    assert!(
        check_cgroups_name(id, "4:memory:/kubepods/pod1/0123abcd\n0::/system.slice\n").is_err()
    );
}

#[test]
fn an_init_whose_parent_is_not_containerds_shim_is_refused() {
    assert_eq!(check_shim_parent(7, "containerd-shim\n"), Ok(()));
    for comm in ["bash\n", "sleep\n", "containerd\n", "\n", "runc\n"] {
        assert!(
            matches!(check_shim_parent(7, comm), Err(Refusal::Changed(m)) if m.contains("PID 7")),
            "{comm:?}"
        );
    }
}
