//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B) decoded a nibble at a time, across input
//! split anywhere.
//!
//! The code table itself comes from `httlib-huffman` (RFC 7541 Appendix B as data); its decoder
//! wants a whole string in memory, and a header value may be megabytes long, so the decoding
//! state machine is built here: one state per internal node of the code tree (256), 16
//! transitions each (one per nibble). Every code is at least 5 bits long, so a nibble completes
//! at most one symbol. The table is built once, on first use, and never changes.

use std::sync::OnceLock;

use httlib_huffman::encoder::table::ENCODE_TABLE;

/// The EOS symbol (RFC 7541 §5.2: a string containing it is a decoding error).
const EOS: usize = 256;

/// Internal nodes of the code tree: a complete binary tree with 257 leaves has 256.
const STATES: usize = 256;

/// One transition: the next state, and the symbol completed on the way (if any).
#[derive(Debug, Clone, Copy, Default)]
struct Step {
    next: u8,
    /// A symbol was completed.
    emits: bool,
    /// The symbol (valid when `emits`).
    symbol: u8,
    /// EOS was decoded: the string is invalid.
    fails: bool,
}

#[derive(Debug)]
struct Table {
    steps: Vec<[Step; 16]>,
    /// Whether a string may end in this state: the bits since the last symbol are a prefix of
    /// EOS (all ones) no longer than 7 bits (RFC 7541 §5.2).
    may_end: [bool; STATES],
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(build)
}

/// A child of an internal node: another internal node, or a symbol.
#[derive(Debug, Clone, Copy)]
enum Child {
    Node(usize),
    Leaf(usize),
    Empty,
}

fn build() -> Table {
    // The tree: node 0 is the root; children[n] = [bit 0, bit 1].
    let mut children: Vec<[Child; 2]> = vec![[Child::Empty; 2]];
    for (symbol, &(len, code)) in ENCODE_TABLE.iter().enumerate() {
        let mut node = 0;
        for i in (0..u32::from(len)).rev() {
            let bit = ((code >> i) & 1) as usize;
            if i == 0 {
                children[node][bit] = Child::Leaf(symbol);
            } else {
                node = match children[node][bit] {
                    Child::Node(n) => n,
                    _ => {
                        children.push([Child::Empty; 2]);
                        let n = children.len() - 1;
                        children[node][bit] = Child::Node(n);
                        n
                    }
                };
            }
        }
    }
    debug_assert_eq!(children.len(), STATES);
    // Which nodes lie on the all-ones path within 7 bits of the root.
    let mut may_end = [false; STATES];
    let mut node = 0;
    may_end[0] = true;
    for _ in 0..7 {
        match children[node][1] {
            Child::Node(n) => {
                may_end[n] = true;
                node = n;
            }
            _ => break,
        }
    }
    let steps = (0..children.len())
        .map(|state| {
            let mut row = [Step::default(); 16];
            for (nibble, step) in row.iter_mut().enumerate() {
                let mut node = state;
                for i in (0..4).rev() {
                    let bit = (nibble >> i) & 1;
                    match children[node][bit] {
                        Child::Node(n) => node = n,
                        Child::Leaf(EOS) | Child::Empty => {
                            step.fails = true;
                            node = 0;
                        }
                        Child::Leaf(symbol) => {
                            step.emits = true;
                            step.symbol = symbol as u8;
                            node = 0;
                        }
                    }
                }
                step.next = node as u8;
            }
            row
        })
        .collect();
    Table { steps, may_end }
}

/// Why a Huffman string is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HuffmanError {
    /// The EOS symbol inside a string.
    #[error("EOS symbol inside a Huffman string")]
    Eos,
    /// The string ends with more than 7 bits of padding, or padding that is not all ones.
    #[error("invalid Huffman padding")]
    Padding,
}

/// The decoding state of one Huffman string.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Huffman {
    state: u8,
}

impl Huffman {
    /// Decodes `input`, handing each symbol to `out`.
    pub(crate) fn feed(
        &mut self,
        input: &[u8],
        mut out: impl FnMut(u8),
    ) -> Result<(), HuffmanError> {
        let t = table();
        let mut state = self.state;
        for &b in input {
            for nibble in [b >> 4, b & 0x0f] {
                let step = t.steps[usize::from(state)][usize::from(nibble)];
                if step.fails {
                    return Err(HuffmanError::Eos);
                }
                if step.emits {
                    out(step.symbol);
                }
                state = step.next;
            }
        }
        self.state = state;
        Ok(())
    }

    /// The string ended: checks its padding.
    pub(crate) fn finish(self) -> Result<(), HuffmanError> {
        if table().may_end[usize::from(self.state)] {
            Ok(())
        } else {
            Err(HuffmanError::Padding)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(input: &[u8]) -> Result<Vec<u8>, HuffmanError> {
        let mut h = Huffman::default();
        let mut out = Vec::new();
        h.feed(input, |b| out.push(b))?;
        h.finish()?;
        Ok(out)
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    #[test]
    fn rfc7541_examples_decode() {
        // C.4.1 and C.6.1.
        assert_eq!(
            decode(&hex("f1e3c2e5f23a6ba0ab90f4ff")).as_deref(),
            Ok(&b"www.example.com"[..])
        );
        assert_eq!(decode(&hex("6402")).as_deref(), Ok(&b"302"[..]));
        assert_eq!(
            decode(&hex("d07abe941054d444a8200595040b8166e082a62d1bff")).as_deref(),
            Ok(&b"Mon, 21 Oct 2013 20:13:21 GMT"[..])
        );
    }

    #[test]
    fn every_byte_round_trips_split_anywhere() {
        let all: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        let mut enc = Vec::new();
        httlib_huffman::encode(&all, &mut enc).expect("encode");
        assert_eq!(decode(&enc), Ok(all.clone()));
        for at in 0..enc.len() {
            let mut h = Huffman::default();
            let mut out = Vec::new();
            h.feed(&enc[..at], |b| out.push(b)).expect("first part");
            h.feed(&enc[at..], |b| out.push(b)).expect("second part");
            h.finish().expect("padding");
            assert_eq!(out, all, "split at {at}");
        }
    }

    #[test]
    fn eos_and_bad_padding_are_errors() {
        // 30 ones: EOS itself.
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xfc]), Err(HuffmanError::Eos));
        // '0' (00000) then three zero bits of padding.
        assert_eq!(decode(&[0x00]), Err(HuffmanError::Padding));
        // A whole byte of ones after a complete symbol: 8 bits of padding.
        assert_eq!(decode(&[0x07, 0xff]), Err(HuffmanError::Padding));
        // '0' then three one bits: valid.
        assert_eq!(decode(&[0x07]).as_deref(), Ok(&b"0"[..]));
        assert_eq!(decode(&[]).as_deref(), Ok(&b""[..]));
    }
}
