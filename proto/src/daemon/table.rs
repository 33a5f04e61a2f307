//! Plain-text tables for the one-shot commands an operator types (`podward-housekeeper plan`,
//! `podward-prober status`): left-aligned columns two spaces apart, as `kubectl get` prints them.
//! Every cell is written through [`for_terminal`], so a cell from outside (a file name, a probe's
//! output) can neither break a row nor drive the terminal; it is idempotent on cells a caller has
//! already made printable (and cut).

use crate::outside_text::for_terminal;

/// `header` and `rows` as aligned lines: each column as wide as its widest cell (in characters,
/// once escaped), the last one unpadded, no trailing spaces.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| for_terminal(c)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
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
    for r in &rows {
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

    #[test]
    fn a_cell_never_breaks_its_row() {
        let rows = vec![vec!["x\nFORGED ROW".to_owned(), "\u{1b}[2J".to_owned()]];
        let t = render(&["A", "B"], &rows);
        assert_eq!(t.lines().count(), 2, "{t}");
        assert!(!t.contains('\u{1b}'), "{t:?}");
    }
}
