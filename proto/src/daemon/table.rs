//! Plain-text tables for the one-shot commands an operator types (`podward-housekeeper plan`,
//! `podward-prober status`): left-aligned columns two spaces apart, as `kubectl get` prints them.
//! Callers pass cells fit for a terminal (no newlines or control characters).

/// `header` and `rows` as aligned lines: each column as wide as its widest cell (in characters),
/// the last one unpadded, no trailing spaces.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_the_widest_cell_in_characters() {
        let rows = vec![
            vec!["héllo".to_owned(), "x".to_owned(), "last".to_owned()],
            vec!["a".to_owned(), String::new(), String::new()],
        ];
        assert_eq!(
            render(&["A", "BB", "C"], &rows),
            "A      BB  C\n\
             héllo  x   last\n\
             a\n"
        );
    }
}
