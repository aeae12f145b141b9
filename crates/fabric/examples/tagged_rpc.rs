//! Request and response over tagged messages between two endpoints of one
//! program: a server thread answers whatever requests arrive, a client
//! keeps several requests in flight and matches each response by its tag.
//!
//! ```text
//! cargo run -p fabric --example tagged_rpc            # tcp on 127.0.0.1
//! cargo run -p fabric --example tagged_rpc -- shm
//! ```
//!
//! Tags: a request carries its id; the response carries the same id with
//! the top bit set, so the client posts one receive per request, for
//! exactly its answer. The server's receives ignore every bit but the top
//! one, so they take any request. Buffers go round: received requests are
//! posted again, sent responses are reused.
//!
//! Exits 0 when every response is right, 1 otherwise.

mod common;

use std::collections::HashMap;

use common::Res;
use fabric::prelude::*;

/// The top bit of a response's tag.
const RESPONSE: u64 = 1 << 63;
/// A request with this bit set asks the server to stop.
const SHUTDOWN: u64 = 1 << 62;
/// Requests in all, and at most in flight at once.
const REQUESTS: u64 = 300;
const WINDOW: usize = 16;
/// Receives the server keeps posted.
const POSTED: usize = 8;
/// The largest request or response.
const MAX_MSG: usize = 256;

fn main() -> std::process::ExitCode {
    common::main_with("tagged_rpc", run)
}

/// The request of `id`.
fn request(id: u64) -> Vec<u8> {
    format!("request {id}: {}", "x".repeat((id % 97) as usize)).into_bytes()
}

/// The server's answer to `req`: its length as 8 bytes, then its bytes
/// reversed.
fn answer(req: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(req.len() as u64).to_le_bytes());
    out.extend(req.iter().rev());
}

fn serve(mut server: safe::Endpoint, client: FiAddr) -> Res<u64> {
    // Tag 0, ignoring every bit but RESPONSE: any request.
    let any_request = !RESPONSE;
    for _ in 0..POSTED {
        server.trecv(0, any_request, vec![0; MAX_MSG])?;
    }
    let mut spare: Vec<Vec<u8>> = Vec::new();
    let mut answered = 0;
    loop {
        let c = server.wait()?.check()?;
        match c.kind() {
            OpKind::TaggedRecv => {
                let tag = c.tag();
                if tag & SHUTDOWN != 0 {
                    break;
                }
                let mut out = spare.pop().unwrap_or_default();
                answer(c.received().unwrap_or_default(), &mut out);
                server.tsend(client, RESPONSE | tag, out)?;
                answered += 1;
                // The request's buffer takes the next request.
                let mut buf = c.into_buf().unwrap_or_default();
                buf.resize(MAX_MSG, 0);
                server.trecv(0, any_request, buf)?;
            }
            _ => spare.extend(c.into_buf()),
        }
    }
    // Let the last responses go out; the receives still posted are
    // cancelled when the endpoint drops.
    while server.in_flight() > POSTED - 1 {
        let c = server.wait()?;
        if c.kind() == OpKind::TaggedSend {
            c.check()?;
        }
    }
    Ok(answered)
}

fn run() -> Res<()> {
    let prov = common::provider();
    let info = common::entry(&prov, Caps::TAGGED)?;
    let domain = safe::Domain::open(&info)?;
    let mut client: safe::Endpoint = domain.endpoint()?;
    let server: safe::Endpoint = domain.endpoint()?;
    let to_server = client.insert(&server.name()?)?;
    let to_client = server.insert(&client.name()?)?;
    println!("tagged_rpc over {prov}: {REQUESTS} requests, {WINDOW} in flight");

    let serving = std::thread::spawn(move || serve(server, to_client));

    let mut next = 0u64;
    let mut waiting: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut expected = Vec::new();
    let mut done = 0u64;
    while done < REQUESTS {
        while next < REQUESTS && waiting.len() < WINDOW {
            // The receive for the answer goes first, so it is there when
            // the answer comes.
            client.trecv(RESPONSE | next, 0, vec![0; MAX_MSG])?;
            let req = request(next);
            answer(&req, &mut expected);
            waiting.insert(next, expected.clone());
            client.tsend(to_server, next, req)?;
            next += 1;
        }
        let c = client.wait()?.check()?;
        if c.kind() != OpKind::TaggedRecv {
            continue;
        }
        let id = c.tag() & !RESPONSE;
        let want = waiting
            .remove(&id)
            .ok_or_else(|| format!("a response with tag {:#x} answers no request", c.tag()))?;
        if c.received() != Some(&want[..]) {
            return Err(format!("the response to request {id} is wrong").into());
        }
        done += 1;
    }
    let stop = client.tsend(to_server, SHUTDOWN, Vec::new())?;
    client.wait_for(stop)?.check()?;
    let answered = serving.join().map_err(|_| "the server thread panicked")??;
    if answered != REQUESTS {
        return Err(format!("the server answered {answered} requests of {REQUESTS}").into());
    }
    println!("all {REQUESTS} responses matched their requests");
    Ok(())
}
