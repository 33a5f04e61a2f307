//! The probe targets, run in a child process so the prober's CPU is measured alone: HTTP servers
//! answering `200 ok` and bare TCP listeners, spread over many 127.0.0.x addresses so 30,000
//! short connections a second never run out of 4-tuples.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One listening target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    pub(crate) http: bool,
}

/// Binds `ips` × `per_ip` HTTP and as many TCP listeners, prints them (`http|tcp ip port` per
/// line), runs `also` with them (the fake shim, so its memory is not the prober's either), prints
/// `ready` and serves until killed.
pub(crate) fn serve<F>(
    ips: u8,
    per_ip: u16,
    also: impl FnOnce(Vec<Target>) -> F,
) -> Result<(), Box<dyn std::error::Error>>
where
    F: std::future::Future<Output = Result<(), Box<dyn std::error::Error>>>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut out = std::io::stdout().lock();
        let mut targets = Vec::new();
        for i in 0..ips {
            let ip = Ipv4Addr::new(127, 0, 0, 10 + i);
            for k in 0..per_ip * 2 {
                let l = TcpListener::bind((ip, 0)).await?;
                let http = k % 2 == 0;
                targets.push(Target {
                    addr: l.local_addr()?,
                    http,
                });
                writeln!(
                    out,
                    "{} {}",
                    if http { "http" } else { "tcp" },
                    l.local_addr()?
                )?;
                tokio::spawn(accept_loop(l, http));
            }
        }
        also(targets).await?;
        writeln!(out, "ready")?;
        out.flush()?;
        drop(out);
        std::future::pending::<()>().await;
        Ok(())
    })
}

async fn accept_loop(l: TcpListener, http: bool) {
    loop {
        let Ok((mut s, _)) = l.accept().await else {
            continue;
        };
        if !http {
            drop(s); // a TCP probe only needs the handshake
            continue;
        }
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            let mut seen = 0;
            loop {
                match s.read(&mut buf[seen..]).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => seen += n,
                }
                if buf[..seen].windows(4).any(|w| w == b"\r\n\r\n") || seen == buf.len() {
                    break;
                }
            }
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                .await;
        });
    }
}

/// The HTTP and TCP targets of container `i`: an HTTP listener and a TCP one on the same address
/// (the pod IP), spread round-robin. Both the fake shim's snapshot and the floor use this, so they
/// make the same connections.
pub(crate) fn pair(targets: &[Target], i: usize) -> (Target, Target) {
    let http: Vec<&Target> = targets.iter().filter(|t| t.http).collect();
    let tcp: Vec<&Target> = targets.iter().filter(|t| !t.http).collect();
    let h = *http[i % http.len()];
    let t = tcp
        .iter()
        .find(|t| t.addr.ip() == h.addr.ip())
        .copied()
        .copied()
        .unwrap_or(*tcp[i % tcp.len()]);
    (h, t)
}

/// Parses the child's listing.
pub(crate) fn parse(lines: &[String]) -> Vec<Target> {
    lines
        .iter()
        .filter_map(|l| {
            let (kind, addr) = l.split_once(' ')?;
            Some(Target {
                addr: addr.parse().ok()?,
                http: kind == "http",
            })
        })
        .collect()
}
