//! An async echo server and many concurrent clients in one program, on
//! tokio (feature `tokio`): every echo is checked.
//!
//! ```text
//! cargo run -p fabric --features tokio --example tokio_echo          # tcp on 127.0.0.1
//! cargo run -p fabric --features tokio --example tokio_echo -- shm
//! ```
//!
//! **RDM, not MSG.** The safe layer (and so [`AsyncEndpoint`]) opens
//! reliable-datagram (RDM) endpoints; connected MSG endpoints are not
//! served by it yet. So the server is one RDM endpoint that every client
//! endpoint sends to, rather than a listener with one connection per
//! client; what the example shows (one server answering many clients, each
//! with many requests in flight from many tasks) is the same.
//!
//! - The **server** works from its completion stream: it keeps receives
//!   posted for any request, echoes each request back with the response
//!   bit set in its tag, and reposts the buffer as a receive once the echo
//!   is sent. Buffers go round; nothing is allocated per request.
//! - Each **client** is an endpoint of its own, shared by several tasks;
//!   each task sends requests one after the other, awaiting each echo
//!   (tagged with the request's tag) and checking its bytes.
//!
//! Tags: client number in bits 32..48, request number below, bit 63 set on
//! responses. Exits 0 when every echo came back right, 1 otherwise.

mod common;

use std::time::{Duration, Instant};

use common::Res;
use fabric::prelude::*;
use fabric::safe::AsyncEndpoint;

/// The response bit of a tag.
const RESPONSE: u64 = 1 << 63;
/// Client endpoints, tasks per client, requests per task.
const CLIENTS: u64 = 8;
const TASKS: u64 = 16;
const REQUESTS: u64 = 25;
/// Receives the server keeps posted.
const POSTED: usize = 64;
/// The largest request.
const MAX_MSG: usize = 512;

fn main() -> std::process::ExitCode {
    common::main_with("tokio_echo", || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        rt.block_on(async {
            match tokio::time::timeout(Duration::from_secs(60), run()).await {
                Ok(r) => r,
                Err(_) => Err("the echoes did not all come back within 60 s".into()),
            }
        })
    })
}

/// The bytes of request `tag`: its tag, repeated, then a pattern; 1 to
/// `MAX_MSG` bytes long.
fn request(tag: u64) -> Vec<u8> {
    let len = 1 + (tag.wrapping_mul(2_654_435_761) % MAX_MSG as u64) as usize;
    (0..len)
        .map(|i| (tag.to_le_bytes()[i % 8]).wrapping_add(i as u8))
        .collect()
}

async fn run() -> Res<()> {
    let prov = common::provider();
    let info = common::entry(&prov, Caps::MSG | Caps::TAGGED)?;
    let domain = safe::Domain::open(&info)?;

    let server = AsyncEndpoint::new(domain.endpoint()?)?;
    let mut clients = Vec::new();
    let mut client_addrs = Vec::new();
    for _ in 0..CLIENTS {
        let client = AsyncEndpoint::new(domain.endpoint()?)?;
        // The server names client i by the i-th handle it inserted.
        client_addrs.push(server.insert(&client.name()?)?);
        let to_server = client.insert(&server.name()?)?;
        clients.push((client, to_server));
    }

    let total = CLIENTS * TASKS * REQUESTS;
    let serving = tokio::spawn(serve(server, client_addrs, total));

    let start = Instant::now();
    let mut tasks = Vec::new();
    for (c, (client, to_server)) in clients.into_iter().enumerate() {
        for t in 0..TASKS {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let mut reply = vec![0u8; MAX_MSG];
                for r in 0..REQUESTS {
                    let tag = ((c as u64) << 32) | (t * REQUESTS + r);
                    let msg = request(tag);
                    // Post the receive for the echo with the send, so the
                    // echo never waits for a receive.
                    let (echo, sent) = tokio::join!(
                        client.trecv(tag | RESPONSE, 0, reply),
                        client.tsend(to_server, tag, msg.clone()),
                    );
                    sent?.check()?;
                    let echo = echo?.check()?;
                    if echo.received() != Some(&msg[..]) {
                        return Err(format!(
                            "client {c} request {tag:#x}: the echo has {} bytes, {} sent, or differs",
                            echo.transferred(),
                            msg.len()
                        )
                        .into());
                    }
                    reply = echo.into_buf().ok_or("the receive did not hand its buffer back")?;
                }
                Res::Ok(())
            }));
        }
    }
    for task in tasks {
        task.await??;
    }
    serving.await??;
    println!(
        "tokio_echo on {prov}: {total} echoes from {CLIENTS} clients x {TASKS} tasks verified in {:?}",
        start.elapsed()
    );
    Ok(())
}

/// Echoes `total` requests, then returns.
async fn serve(server: AsyncEndpoint, clients: Vec<FiAddr>, total: u64) -> Res<()> {
    let mut stream = server.completions();
    for _ in 0..POSTED {
        // Any request: only the response bit must be clear.
        server.post_trecv(0, !RESPONSE, vec![0; MAX_MSG])?;
    }
    let mut echoed = 0;
    while echoed < total {
        let done = stream.next().await?.check()?;
        match done.kind() {
            OpKind::TaggedRecv => {
                let tag = done.tag();
                let len = done.transferred();
                let to = usize::try_from(tag >> 32)
                    .ok()
                    .and_then(|c| clients.get(c).copied())
                    .ok_or_else(|| format!("a request from no known client (tag {tag:#x})"))?;
                let mut buf = done.into_buf().ok_or("a receive without its buffer")?;
                buf.truncate(len);
                // The send queue may be full: let completions be read and
                // post again.
                let mut posted = server.post_tsend(to, tag | RESPONSE, buf);
                while let Err(r) = posted {
                    if r.kind() != ErrorKind::Again {
                        return Err(r.into());
                    }
                    let buf = r.into_buf().ok_or("a refused send without its buffer")?;
                    tokio::task::yield_now().await;
                    posted = server.post_tsend(to, tag | RESPONSE, buf);
                }
            }
            OpKind::TaggedSend => {
                echoed += 1;
                let mut buf = done.into_buf().ok_or("a send without its buffer")?;
                buf.resize(MAX_MSG, 0);
                if echoed + (POSTED as u64) <= total {
                    server.post_trecv(0, !RESPONSE, buf)?;
                }
            }
            other => return Err(format!("the server saw an unexpected {other}").into()),
        }
    }
    Ok(())
}
