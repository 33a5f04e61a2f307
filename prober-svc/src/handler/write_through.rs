//! `AsyncWrite` for the probe streams' wrappers that act on what is read (metering it, keeping
//! its first bytes, filtering a head) and write straight through to the stream they wrap.

/// Implements `AsyncWrite` for `$wrapper<S>` by handing every call to its `inner` field.
macro_rules! write_through {
    ($wrapper:ident) => {
        impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $wrapper<S> {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
            }
        }
    };
}

pub(crate) use write_through;
