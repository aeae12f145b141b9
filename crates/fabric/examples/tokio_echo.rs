//! An async echo server and many concurrent clients in one program, on
//! tokio (feature `tokio`): every echo is checked.
//!
//! ```text
//! cargo run -p fabric --features tokio --example tokio_echo          # tcp on 127.0.0.1
//! cargo run -p fabric --features tokio --example tokio_echo -- shm
//! ```
//!
//! **Connected (MSG)**, where the provider has connected endpoints (tcp,
//! verbs): the server is an [`AsyncListener`] that accepts one
//! [`AsyncConnection`] per client and serves each in a task of its own;
//! each client is a connection shared by several tasks.
//!
//! **Reliable datagrams (RDM)** otherwise (shm has no MSG endpoints): the
//! server is one [`AsyncEndpoint`] that every client endpoint sends to;
//! the rest is the same.
//!
//! - The **server** works from a completion stream: it keeps receives
//!   posted for any request, echoes each request back with the response
//!   bit set in its tag, and reposts the buffer as a receive once the echo
//!   is sent. Buffers go round; nothing is allocated per request. Over
//!   MSG it closes each connection once it has echoed all of its requests,
//!   and the client waits to see it closed.
//! - Each **client** task sends requests one after the other, awaiting
//!   each echo (tagged with the request's tag) and checking its bytes.
//!
//! Tags: client number in bits 32..48, request number below, bit 63 set on
//! responses. Exits 0 when every echo came back right, 1 otherwise.

mod common;

use std::time::{Duration, Instant};

use common::Res;
use fabric::prelude::*;
use fabric::safe::{AsyncConnection, AsyncEndpoint, AsyncListener, Completions};

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
    match msg_entry(&prov) {
        Some(info) => run_msg(&prov, &info).await,
        None => {
            println!("tokio_echo: {prov} has no connected (MSG) endpoints; echoing over RDM");
            run_rdm(&prov).await
        }
    }
}

/// The first MSG entry of `prov` with tagged messages, if it has one.
fn msg_entry(prov: &str) -> Option<Info> {
    let mut hints = Hints::new()
        .caps(Caps::MSG | Caps::TAGGED)
        .ep_type(EpType::Msg)
        .provider(prov);
    if prov == "tcp" {
        hints = hints.node("127.0.0.1").source();
    }
    hints.getinfo().ok()?.into_iter().next()
}

/// Checks an echo against the request it answers; hands the receive
/// buffer back for the next one.
fn verify(client: usize, tag: u64, msg: &[u8], echo: Completion<Vec<u8>>) -> Res<Vec<u8>> {
    let echo = echo.check()?;
    if echo.tag() != tag | RESPONSE || echo.received() != Some(msg) {
        return Err(format!(
            "client {client} request {tag:#x}: the echo (tag {:#x}) has {} bytes, {} sent, or differs",
            echo.tag(),
            echo.transferred(),
            msg.len()
        )
        .into());
    }
    Ok(echo
        .into_buf()
        .ok_or("the receive did not hand its buffer back")?)
}

/// The echo over connections: a listener, one connection per client.
async fn run_msg(prov: &str, info: &Info) -> Res<()> {
    let domain = safe::Domain::open(info)?;
    let listener = AsyncListener::bind(&domain)?;
    let to = listener.name()?;
    let per_client = TASKS * REQUESTS;

    // The server: accepts every client, serves each in a task of its own.
    let serving = tokio::spawn(async move {
        let mut conns = Vec::new();
        for _ in 0..CLIENTS {
            let conn: AsyncConnection = listener.accept().await?;
            conns.push(tokio::spawn(serve_msg(conn, per_client)));
        }
        let mut echoed = 0;
        for c in conns {
            echoed += c.await??;
        }
        Res::Ok(echoed)
    });

    let start = Instant::now();
    let mut clients = Vec::new();
    for c in 0..CLIENTS as usize {
        let conn: AsyncConnection = AsyncConnection::connect(&domain, &to).await?;
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let conn = conn.clone();
            tasks.push(tokio::spawn(async move {
                let mut reply = vec![0u8; MAX_MSG];
                for r in 0..REQUESTS {
                    let tag = ((c as u64) << 32) | (t * REQUESTS + r);
                    let msg = request(tag);
                    let (echo, sent) = tokio::join!(
                        conn.trecv(tag | RESPONSE, 0, reply),
                        conn.tsend(tag, msg.clone()),
                    );
                    sent?.check()?;
                    reply = verify(c, tag, &msg, echo?)?;
                }
                Res::Ok(())
            }));
        }
        clients.push((conn, tasks));
    }
    for (conn, tasks) in clients {
        for task in tasks {
            task.await??;
        }
        // The server closes the connection once it echoed everything.
        conn.closed().await?;
    }
    let echoed = serving.await??;
    let total = CLIENTS * TASKS * REQUESTS;
    if echoed != total {
        return Err(format!("the server echoed {echoed} requests, not {total}").into());
    }
    println!(
        "tokio_echo on {prov} (MSG): {total} echoes over {CLIENTS} connections x {TASKS} tasks verified in {:?}",
        start.elapsed()
    );
    Ok(())
}

/// Echoes `total` requests on one connection, then closes it; returns how
/// many it echoed.
async fn serve_msg(conn: AsyncConnection, total: u64) -> Res<u64> {
    let mut stream = conn.completions();
    let echoed = echo_loop(
        &mut stream,
        total,
        |tag, buf| conn.post_tsend(tag, buf),
        |buf| conn.post_trecv(0, !RESPONSE, buf),
    )
    .await?;
    conn.drain().await?;
    conn.shutdown()?;
    Ok(echoed)
}

/// The server's loop over its completion stream: keeps `POSTED` receives
/// for requests, echoes each request with `send` and reposts its buffer
/// with `recv` once the echo is sent, until `total` echoes went out.
async fn echo_loop(
    stream: &mut Completions,
    total: u64,
    send: impl Fn(u64, Vec<u8>) -> Result<OpId, Rejected<Vec<u8>>>,
    recv: impl Fn(Vec<u8>) -> Result<OpId, Rejected<Vec<u8>>>,
) -> Res<u64> {
    for _ in 0..POSTED.min(total as usize) {
        // Any request: only the response bit must be clear.
        recv(vec![0; MAX_MSG])?;
    }
    let mut echoed = 0;
    while echoed < total {
        let done = stream.next().await?.check()?;
        match done.kind() {
            OpKind::TaggedRecv => {
                let tag = done.tag();
                let len = done.transferred();
                let mut buf = done.into_buf().ok_or("a receive without its buffer")?;
                buf.truncate(len);
                // The send queue may be full: let completions be read and
                // post again.
                let mut posted = send(tag | RESPONSE, buf);
                while let Err(r) = posted {
                    if r.kind() != ErrorKind::Again {
                        return Err(r.into());
                    }
                    let buf = r.into_buf().ok_or("a refused send without its buffer")?;
                    tokio::task::yield_now().await;
                    posted = send(tag | RESPONSE, buf);
                }
            }
            OpKind::TaggedSend => {
                echoed += 1;
                let mut buf = done.into_buf().ok_or("a send without its buffer")?;
                buf.resize(MAX_MSG, 0);
                if echoed + (POSTED as u64) <= total {
                    recv(buf)?;
                }
            }
            other => return Err(format!("the server saw an unexpected {other}").into()),
        }
    }
    Ok(echoed)
}

async fn run_rdm(prov: &str) -> Res<()> {
    let info = common::entry(prov, Caps::MSG | Caps::TAGGED)?;
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
    let serving = tokio::spawn(serve_rdm(server, client_addrs, total));

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
                    reply = verify(c, tag, &msg, echo?)?;
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
        "tokio_echo on {prov} (RDM): {total} echoes from {CLIENTS} clients x {TASKS} tasks verified in {:?}",
        start.elapsed()
    );
    Ok(())
}

/// Echoes `total` requests from the RDM clients, then returns.
async fn serve_rdm(server: AsyncEndpoint, clients: Vec<FiAddr>, total: u64) -> Res<()> {
    let mut stream = server.completions();
    // The client is named by bits 32..48 of the tag.
    let to = |tag: u64| {
        usize::try_from((tag >> 32) & 0xffff)
            .ok()
            .and_then(|c| clients.get(c).copied())
            .unwrap_or(FiAddr::NOTAVAIL)
    };
    echo_loop(
        &mut stream,
        total,
        |tag, buf| server.post_tsend(to(tag), tag, buf),
        |buf| server.post_trecv(0, !RESPONSE, buf),
    )
    .await?;
    Ok(())
}
