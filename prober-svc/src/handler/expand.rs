//! `$(VAR)` expansion of exec probe commands, as kubelet's `ExpandContainerCommandOnlyStatic`
//! (the forked `expansion.Expand` of `third_party/forked/golang/expansion`):
//! `$(NAME)` becomes the value of a static env var `NAME`; an unknown `$(NAME)` stays as written;
//! `$$` is an escaped `$`; an unterminated `$(` and a `$` before any other byte are kept.

/// Expands every argument of `cmd` with `env` (the later of duplicate names wins, as Go's map).
pub fn expand_command(cmd: &[String], env: &[(String, String)]) -> Vec<String> {
    cmd.iter()
        .map(|arg| expand(arg, |name| lookup(env, name)))
        .collect()
}

fn lookup<'a>(env: &'a [(String, String)], name: &[u8]) -> Option<&'a str> {
    env.iter()
        .rev()
        .find(|(k, _)| k.as_bytes() == name)
        .map(|(_, v)| v.as_str())
}

/// One string. Works on bytes like Go; the only non-ASCII subtlety (Go's `string(byte)` after a
/// lone `$`) is reproduced by re-encoding that byte as a Latin-1 character.
pub fn expand<'a>(input: &str, mapping: impl Fn(&[u8]) -> Option<&'a str>) -> String {
    let bytes = input.as_bytes();
    if !bytes.contains(&b'$') {
        return input.to_owned();
    }
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.extend_from_slice(&bytes[checkpoint..cursor]);
            let rest = &bytes[cursor + 1..];
            let advance = match rest[0] {
                b'$' => {
                    out.push(b'$');
                    1
                }
                b'(' => match rest.iter().position(|&b| b == b')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match mapping(name) {
                            Some(v) => out.extend_from_slice(v.as_bytes()),
                            None => {
                                out.extend_from_slice(b"$(");
                                out.extend_from_slice(name);
                                out.push(b')');
                            }
                        }
                        close + 1
                    }
                    None => {
                        out.extend_from_slice(b"$(");
                        1
                    }
                },
                other => {
                    out.push(b'$');
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(char::from(other).encode_utf8(&mut buf).as_bytes());
                    1
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    if checkpoint < bytes.len() {
        out.extend_from_slice(&bytes[checkpoint..]);
    }
    match String::from_utf8(out) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}
