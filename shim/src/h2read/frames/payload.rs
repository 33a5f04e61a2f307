//! The payloads of the frames the reader follows: fixed fields, header block fragments,
//! SETTINGS parameters and DATA, each read as far as the chunk goes.

use super::reader::{FrameReader, State};
use super::sink::{FrameError, FrameSink};
use super::wire::{END_STREAM, GOAWAY, RST_STREAM};

impl FrameReader {
    /// Bytes of RST_STREAM's or GOAWAY's fixed fields (`left` of them), then `skip` bytes.
    pub(super) fn read_fixed(
        &mut self,
        chunk: &[u8],
        pos: usize,
        (kind, stream, left, skip): (u8, u32, usize, usize),
        sink: &mut impl FrameSink,
    ) -> usize {
        let take = left.min(chunk.len() - pos);
        self.fixed[self.fixed_len..self.fixed_len + take].copy_from_slice(&chunk[pos..pos + take]);
        self.fixed_len += take;
        if take == left {
            self.state = if skip > 0 {
                State::Skip { left: skip }
            } else {
                State::Head
            };
            self.fixed_frame(kind, stream, sink);
        } else {
            self.state = State::Fixed {
                kind,
                stream,
                left: left - take,
                skip,
            };
        }
        pos + take
    }

    /// Bytes of a header block fragment frame: its pad length, the bytes before the fragment,
    /// the fragment (handed out as it comes), then its padding.
    pub(super) fn read_fragment(
        &mut self,
        chunk: &[u8],
        pos: usize,
        sink: &mut impl FrameSink,
    ) -> Result<usize, FrameError> {
        let State::Fragment {
            pad_pending,
            skip,
            left,
            pad,
            end_headers,
        } = self.state
        else {
            unreachable!("read_fragment outside a fragment frame");
        };
        let avail = chunk.len() - pos;
        let (pos, skip, left, pad) = if pad_pending {
            let p = usize::from(chunk[pos]);
            if p + skip > left - 1 {
                return Err(FrameError::Malformed("HEADERS"));
            }
            (pos + 1, skip, left - 1, p)
        } else if skip > 0 {
            let take = skip.min(avail);
            (pos + take, skip - take, left - take, pad)
        } else {
            let take = (left - pad).min(avail);
            sink.block_fragment(&chunk[pos..pos + take])?;
            (pos + take, 0, left - take, pad)
        };
        self.state = State::Fragment {
            pad_pending: false,
            skip,
            left,
            pad,
            end_headers,
        };
        if skip == 0 && left == pad {
            self.fragment_done(pad, end_headers, sink)?;
        }
        Ok(pos)
    }

    /// Bytes of SETTINGS parameters (`left` in the frame), each reported once its 6 bytes are
    /// in.
    pub(super) fn read_setting(
        &mut self,
        chunk: &[u8],
        pos: usize,
        left: usize,
        sink: &mut impl FrameSink,
    ) -> usize {
        let take = (6 - self.fixed_len).min(left).min(chunk.len() - pos);
        self.fixed[self.fixed_len..self.fixed_len + take].copy_from_slice(&chunk[pos..pos + take]);
        self.fixed_len += take;
        let left = left - take;
        if self.fixed_len == 6 {
            self.fixed_len = 0;
            let f = self.fixed;
            sink.setting(
                u16::from_be_bytes([f[0], f[1]]),
                u32::from_be_bytes([f[2], f[3], f[4], f[5]]),
            );
        }
        if left == 0 {
            self.state = State::Head;
            sink.settings(false);
        } else {
            self.state = State::Settings { left };
        }
        pos + take
    }

    /// DATA payload bytes, handed out as slices of `chunk`, then the frame's padding.
    pub(super) fn read_data(
        &mut self,
        chunk: &[u8],
        pos: usize,
        sink: &mut impl FrameSink,
    ) -> Result<usize, FrameError> {
        let State::Data {
            stream,
            end_stream,
            left,
            pad,
        } = self.state
        else {
            unreachable!("read_data outside a DATA frame");
        };
        let take = left.min(chunk.len() - pos);
        let last = take == left;
        sink.data(stream, chunk, pos..pos + take, end_stream && last)?;
        self.state = if !last {
            State::Data {
                stream,
                end_stream,
                left: left - take,
                pad,
            }
        } else if pad > 0 {
            State::Skip { left: pad }
        } else {
            State::Head
        };
        Ok(pos + take)
    }

    pub(super) fn begin_fragment(
        &mut self,
        pad_pending: bool,
        skip: usize,
        left: usize,
        end_headers: bool,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        self.state = State::Fragment {
            pad_pending,
            skip,
            left,
            pad: 0,
            end_headers,
        };
        if left == 0 {
            self.fragment_done(0, end_headers, sink)?;
        }
        Ok(())
    }

    /// The fragment of a HEADERS, PUSH_PROMISE or CONTINUATION frame is in; `pad` bytes of
    /// padding remain.
    pub(super) fn fragment_done(
        &mut self,
        pad: usize,
        end_headers: bool,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        self.state = if pad > 0 {
            State::Skip { left: pad }
        } else {
            State::Head
        };
        if end_headers {
            self.in_block = false;
            sink.block_end()?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn begin_data(
        &mut self,
        stream: u32,
        flags: u8,
        len: usize,
        pad: usize,
        chunk: &[u8],
        pos: usize,
        sink: &mut impl FrameSink,
    ) -> Result<(), FrameError> {
        let end_stream = flags & END_STREAM != 0;
        if len == 0 {
            if end_stream {
                sink.data(stream, chunk, pos..pos, true)?;
            }
            self.state = if pad > 0 {
                State::Skip { left: pad }
            } else {
                State::Head
            };
        } else {
            self.state = State::Data {
                stream,
                end_stream,
                left: len,
                pad,
            };
        }
        Ok(())
    }

    pub(super) fn fixed_frame(&mut self, kind: u8, stream: u32, sink: &mut impl FrameSink) {
        let p = self.fixed;
        self.fixed_len = 0;
        match kind {
            RST_STREAM => sink.rst_stream(stream, u32::from_be_bytes([p[0], p[1], p[2], p[3]])),
            GOAWAY => {
                let last = u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff;
                sink.goaway(last, u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
            }
            _ => {}
        }
    }
}
