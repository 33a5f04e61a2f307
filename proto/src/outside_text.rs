//! Text that comes from outside podward — file names from a pod's volumes, annotation text,
//! container output — made fit for where it is shown. One place for every CLI and log line, so no
//! renderer forgets a case:
//!
//! - [`from_bytes`]: bytes (a file name) as a `String` for the wire and `--json`, without losing
//!   any: UTF-8 as it is, every other byte as `\xNN`, and `\` as `\\` so the text reads back to
//!   the exact bytes;
//! - [`for_terminal`] / [`for_terminal_cut`]: a `String` as one line a terminal shows as text:
//!   control characters (newlines, tabs, the ESC of terminal sequences) and Unicode's
//!   bidirectional controls (which reorder what a terminal shows) written escaped, so no name or
//!   output can move the cursor, recolour or clear the screen, or forge a table row or log line.

use std::fmt::Write as _;

/// `bytes` as text that reads back to exactly these bytes: valid UTF-8 is kept (control
/// characters included: [`for_terminal`] escapes them where they are shown), each byte of an
/// invalid sequence is written `\xNN` (lower-case hex), and every `\` is doubled, so a name that
/// contains the text `\xff` and a name with the byte 0xff read differently.
pub fn from_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for ch in chunk.valid().chars() {
            if ch == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(ch);
            }
        }
        for b in chunk.invalid() {
            // Writing to a String cannot fail.
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// `s` as one line of text a terminal shows as it is: every control character and bidirectional
/// control written as Rust escapes it (`\n`, `\t`, `\u{1b}`, `\u{202e}`); everything else kept.
pub fn for_terminal(s: &str) -> String {
    for_terminal_cut(s, usize::MAX).0
}

/// [`for_terminal`], cut after at most `max` characters of escaped text (then `…` marks the
/// cut), and whether it was cut. An escape is never cut in half.
pub fn for_terminal_cut(s: &str, max: usize) -> (String, bool) {
    let mut out = String::new();
    let mut chars = 0usize;
    for ch in s.chars() {
        let escaped = needs_escape(ch);
        let n = if escaped {
            ch.escape_default().count()
        } else {
            1
        };
        if chars.saturating_add(n) > max {
            out.push('…');
            return (out, true);
        }
        if escaped {
            out.extend(ch.escape_default());
        } else {
            out.push(ch);
        }
        chars += n;
    }
    (out, false)
}

/// Whether `ch` must not reach a terminal as it is.
fn needs_escape(ch: char) -> bool {
    ch.is_control() || is_bidi_control(ch) || matches!(ch, '\u{2028}' | '\u{2029}')
}

/// Unicode's bidirectional formatting characters (marks, embeddings, overrides, isolates).
fn is_bidi_control(ch: char) -> bool {
    matches!(ch, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_back_exactly_and_never_collide() {
        assert_eq!(from_bytes(b"plain name"), "plain name");
        assert_eq!(from_bytes("héllo".as_bytes()), "héllo");
        assert_eq!(from_bytes(b"a\xffb"), "a\\xffb");
        assert_eq!(from_bytes(b"a\\xffb"), "a\\\\xffb");
        assert_ne!(from_bytes(b"a\xffb"), from_bytes(b"a\\xffb"));
        // Control characters stay for the wire; the terminal escapes them.
        assert_eq!(from_bytes(b"x\n\x1b[2J"), "x\n\u{1b}[2J");
    }

    #[test]
    fn terminal_text_has_no_control_characters_and_one_line() {
        let hostile = "evil\n\u{1b}[2J\rREMOVE_POD_DIR (done)\t\u{202e}txt.exe\u{7f}\u{85}\u{2028}";
        let shown = for_terminal(hostile);
        assert!(!shown.chars().any(needs_escape), "{shown:?}");
        assert_eq!(shown.lines().count(), 1, "{shown:?}");
        assert_eq!(
            shown,
            "evil\\n\\u{1b}[2J\\rREMOVE_POD_DIR (done)\\t\\u{202e}txt.exe\\u{7f}\\u{85}\\u{2028}"
        );
    }

    #[test]
    fn a_cut_counts_escapes_and_never_splits_one() {
        assert_eq!(for_terminal_cut("abc", 3), ("abc".to_owned(), false));
        assert_eq!(for_terminal_cut("abcd", 3), ("abc…".to_owned(), true));
        assert_eq!(for_terminal_cut("a\nb", 2), ("a…".to_owned(), true));
        assert_eq!(for_terminal_cut("a\nb", 3), ("a\\n…".to_owned(), true));
    }
}
