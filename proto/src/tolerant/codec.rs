//! A tonic codec whose answers are decoded with [`super::decode`]: prost's encoder for the
//! request, a tolerant decoder for the response.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

use super::decode::Decoded;

/// Encodes `Req` with prost; decodes `Resp` as a [`Decoded`] (repairs reported, never fatal).
#[derive(Debug)]
pub struct TolerantCodec<Req, Resp> {
    _pd: PhantomData<fn(Req) -> Resp>,
}

impl<Req, Resp> Default for TolerantCodec<Req, Resp> {
    fn default() -> Self {
        Self { _pd: PhantomData }
    }
}

/// The decoding half of [`TolerantCodec`].
#[derive(Debug)]
pub struct TolerantDecoder<Resp> {
    _pd: PhantomData<fn() -> Resp>,
}

impl<Req, Resp> Codec for TolerantCodec<Req, Resp>
where
    Req: Message + Send + 'static,
    Resp: Message + Default + Send + 'static,
{
    type Encode = Req;
    type Decode = Decoded<Resp>;
    type Encoder = ProstEncoder<Req>;
    type Decoder = TolerantDecoder<Resp>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        TolerantDecoder { _pd: PhantomData }
    }
}

impl<Resp: Message + Default> Decoder for TolerantDecoder<Resp> {
    type Item = Decoded<Resp>;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Self::Error> {
        use bytes::Buf;
        // `DecodeBuf` over a `BytesMut`: this takes the message's bytes without copying them.
        let bytes = buf.copy_to_bytes(buf.remaining());
        super::decode(bytes)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}
