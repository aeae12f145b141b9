//! What the examples share: picking the provider and its entry.

use fabric::prelude::*;

/// An example's result: any error, printed by `main`.
pub(crate) type Res<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The provider to use: the first argument, else `FABRIC_EXAMPLE_PROVIDER`,
/// else tcp.
pub(crate) fn provider() -> String {
    std::env::args()
        .nth(1)
        .or_else(|| std::env::var("FABRIC_EXAMPLE_PROVIDER").ok())
        .unwrap_or_else(|| "tcp".to_string())
}

/// The first RDM entry of `prov` offering `caps`: on the loopback interface
/// for the socket providers, as shm names its endpoints for the others.
pub(crate) fn entry(prov: &str, caps: Caps) -> Res<Info> {
    let mut hints = Hints::new().caps(caps).ep_type(EpType::Rdm).provider(prov);
    if prov == "tcp" {
        hints = hints.node("127.0.0.1").source();
    }
    let mut list = hints
        .getinfo()
        .map_err(|e| format!("no {prov} entry with {caps}: {e}"))?;
    if list.is_empty() {
        return Err(format!("no {prov} entry with {caps}").into());
    }
    Ok(list.remove(0))
}

/// Runs `body`, prints its error and sets the exit status.
pub(crate) fn main_with(name: &str, body: impl FnOnce() -> Res<()>) -> std::process::ExitCode {
    match body() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Waits for the completion of `id` on `ep` while driving `other` (with
/// manual progress, a peer in the same thread moves only when its queue is
/// read). Gives up after 30 seconds.
#[allow(dead_code)] // not every example drives two endpoints from one thread
pub(crate) fn drive(
    ep: &mut safe::Endpoint,
    other: &mut safe::Endpoint,
    id: OpId,
) -> Res<Completion<Vec<u8>>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        other.progress()?;
        if let Some(c) = ep.try_take(id)? {
            return Ok(c.check()?);
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("no completion of {id} within 30 s").into());
        }
    }
}
