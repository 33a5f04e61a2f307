//! `/proc/<pid>/mountinfo`'s escapes: the kernel writes a space, tab, newline and backslash in a
//! path as an octal triple (`\040`, `\011`, `\012`, `\134`), so that a field never holds the
//! separators. One decoder for every daemon that reads the file (the housekeeper's mount check,
//! the prober's cgroup mounts, the tests' clean-up), on bytes: a path need not be UTF-8.

/// Undoes the escapes in one field: a backslash followed by three octal digits of a byte value
/// (`\000` to `\377`) is that byte; anything else (a backslash at the end, before fewer than
/// three octal digits, a sign, or a value above 255) is kept as it is.
pub fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\'
            && let Some(&[a, b, c]) = field.get(i + 1..i + 4)
            && [a, b, c].iter().all(|d| (b'0'..=b'7').contains(d))
            && a <= b'3'
        {
            out.push((a - b'0') * 64 + (b - b'0') * 8 + (c - b'0'));
            i += 4;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    out
}

/// [`unescape`] for a field read as text: bytes that are not UTF-8 become U+FFFD.
pub fn unescape_text(field: &str) -> String {
    String::from_utf8_lossy(&unescape(field.as_bytes())).into_owned()
}

#[cfg(test)]
mod tests {
    use super::{unescape, unescape_text};

    #[test]
    fn a_text_field_is_unescaped_as_text() {
        assert_eq!(unescape_text(r"/a\040b"), "/a b");
        assert_eq!(unescape_text("/a\\\u{e9}"), "/a\\\u{e9}");
        assert_eq!(unescape_text(r"/a\377"), "/a\u{fffd}");
    }

    #[test]
    fn the_kernels_escapes_are_undone() {
        assert_eq!(
            unescape(br"/a\040b\011c\012d\134e"),
            b"/a b\tc\nd\\e".to_vec()
        );
        assert_eq!(unescape(br"\377\000"), vec![0xff, 0]);
    }

    #[test]
    fn what_is_not_an_escape_is_kept() {
        for kept in [
            &br"/x\"[..],
            br"/x\04",
            br"/x\400",
            br"/x\+12",
            br"/x\8aa",
            "/a\\\u{e9}\u{e9}".as_bytes(),
        ] {
            assert_eq!(unescape(kept), kept.to_vec(), "{kept:?}");
        }
    }
}
