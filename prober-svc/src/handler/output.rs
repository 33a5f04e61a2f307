//! kubelet's limit on probe output: 10 KiB of exec output or HTTP body is read, and every output
//! the prober keeps or sends (`Status`, `Watch` and Kubernetes events, a kill's record) is cut to
//! the same size, once, where a worker takes a probe's outcome (`Outcome::capped`).

/// Largest probe output kept (kubelet's `maxReadLength` / `LimitWriter` size).
pub const MAX_OUTPUT_BYTES: usize = 10 * 1024;

/// `text` cut to at most [`MAX_OUTPUT_BYTES`], on a character boundary.
pub fn capped(text: &str) -> &str {
    if text.len() <= MAX_OUTPUT_BYTES {
        return text;
    }
    let mut end = MAX_OUTPUT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_a_character_boundary() {
        assert_eq!(capped("short"), "short");
        let long = "é".repeat(MAX_OUTPUT_BYTES);
        let cut = capped(&long);
        assert_eq!(cut.len(), MAX_OUTPUT_BYTES);
        let odd = format!("a{long}");
        assert_eq!(capped(&odd).len(), MAX_OUTPUT_BYTES - 1);
    }
}
