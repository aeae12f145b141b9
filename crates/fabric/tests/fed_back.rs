//! An answer fed back as hints matches again, for every compiled-in
//! provider: what a server does with `fi_dupinfo` before opening its
//! endpoint, and a client with the server's answer (issue #18, item 5).
//!
//! Real providers (the global registry), real interfaces: every answer of
//! NULL hints and of generated hints, under API 1.4, 1.5 and 1.17.

#![allow(clippy::unwrap_used, clippy::field_reassign_with_default)]

use fabric::{
    Caps, EpType, GetinfoFlags, Info, Mode, MrMode, MsgOrder, OpFlags, Progress, Registry, Request,
    Threading, Version,
};
use proptest::prelude::*;

fn request(version: Version, hints: Option<&Info>) -> Request<'_> {
    Request {
        version,
        node: None,
        service: None,
        flags: GetinfoFlags::empty(),
        hints,
    }
}

/// Feeds every answer of `hints` back; returns the failures.
fn fed_back(version: Version, hints: Option<&Info>) -> Vec<String> {
    let reg = Registry::global();
    let Ok(answers) = reg.getinfo(&request(version, hints)) else {
        return Vec::new();
    };
    let mut failures = Vec::new();
    for a in &answers {
        match reg.getinfo(&request(version, Some(a))) {
            Ok(again) => {
                // The same provider, endpoint type and names come back.
                let same = again.iter().any(|b| {
                    b.fabric_attr.prov_name == a.fabric_attr.prov_name
                        && b.ep_attr.ep_type == a.ep_attr.ep_type
                        && b.domain_attr.name == a.domain_attr.name
                        && b.caps == a.caps
                });
                if !same {
                    failures.push(format!("{a:?}\n  came back only as {again:?}"));
                }
            }
            Err(e) => failures.push(format!(
                "{} {} {:?}: fed back gives {e}",
                a.fabric_attr.prov_name.as_deref().unwrap_or("?"),
                a.ep_attr.ep_type,
                a.domain_attr.name
            )),
        }
    }
    failures
}

#[test]
fn null_hints_answers_match_when_fed_back() {
    let reg = Registry::global();
    assert!(
        reg.getinfo(&request(Version::CURRENT, None)).is_ok(),
        "no answer at all with NULL hints"
    );
    for v in [Version::new(1, 4), Version::V1_5, Version::CURRENT] {
        let failures = fed_back(v, None);
        assert!(failures.is_empty(), "API {v}:\n{}", failures.join("\n"));
    }
}

fn bits<T: Copy + std::fmt::Debug + std::ops::BitOr<Output = T> + 'static>(
    all: Vec<T>,
    empty: T,
) -> impl Strategy<Value = T> {
    let n = all.len();
    prop::sample::subsequence(all, 0..=n).prop_map(move |v| v.into_iter().fold(empty, |a, b| a | b))
}

/// Provider names the hints may ask for: any (`None`) or one compiled
/// in, so that enough generated hints can match whatever the features.
fn provider_names() -> Vec<Option<&'static str>> {
    let mut v = vec![None];
    if cfg!(feature = "tcp") {
        v.push(Some("tcp"));
    }
    if cfg!(feature = "shm") {
        v.push(Some("shm"));
    }
    v
}

/// Endpoint types the hints may ask for: MSG only where a provider that
/// offers it (tcp) is compiled in.
fn ep_types() -> Vec<EpType> {
    let mut v = vec![EpType::Unspec, EpType::Rdm];
    if cfg!(feature = "tcp") {
        v.push(EpType::Msg);
    }
    v
}

fn arb_hints() -> impl Strategy<Value = (Version, Info)> {
    let caps = bits(
        vec![
            Caps::MSG,
            Caps::TAGGED,
            Caps::RMA,
            Caps::ATOMIC,
            Caps::SEND,
            Caps::RECV,
            Caps::READ,
            Caps::WRITE,
            Caps::REMOTE_READ,
            Caps::REMOTE_WRITE,
            Caps::DIRECTED_RECV,
            Caps::MULTI_RECV,
            Caps::LOCAL_COMM,
            Caps::REMOTE_COMM,
            Caps::SOURCE,
            Caps::FENCE,
        ],
        Caps::empty(),
    );
    let order = bits(
        vec![MsgOrder::SAS, MsgOrder::RAW, MsgOrder::WAW, MsgOrder::SAW],
        MsgOrder::empty(),
    );
    let tx_flags = bits(
        vec![
            OpFlags::COMPLETION,
            OpFlags::TRANSMIT_COMPLETE,
            OpFlags::INJECT_COMPLETE,
        ],
        OpFlags::empty(),
    );
    let mr = bits(
        vec![
            MrMode::LOCAL,
            MrMode::VIRT_ADDR,
            MrMode::PROV_KEY,
            MrMode::ALLOCATED,
        ],
        MrMode::empty(),
    );
    (
        prop::sample::select(vec![Version::new(1, 4), Version::V1_5, Version::CURRENT]),
        caps,
        prop::sample::select(ep_types()),
        order,
        tx_flags,
        any::<bool>(),
        mr,
        prop::sample::select(vec![Threading::Unspec, Threading::Domain, Threading::Safe]),
        any::<bool>(),
        prop::sample::select(provider_names()),
    )
        .prop_map(|(v, caps, ep, order, tx, multi, mr, thr, auto, prov)| {
            let mut h = Info::default();
            h.mode = Mode::CONTEXT | Mode::CONTEXT2 | Mode::RX_CQ_DATA;
            h.caps = caps;
            h.ep_attr.ep_type = ep;
            h.tx_attr.msg_order = order;
            h.rx_attr.msg_order = order;
            h.tx_attr.op_flags = tx;
            if multi {
                h.rx_attr.op_flags = OpFlags::COMPLETION;
            }
            h.domain_attr.mr_mode = mr;
            h.domain_attr.threading = thr;
            if auto {
                h.domain_attr.data_progress = Progress::Auto;
            }
            h.fabric_attr.prov_name = prov.map(String::from);
            (v, h)
        })
}

/// For generated hints, every answer fed back as hints matches again; and
/// enough of the generated hints match at all for that to mean something.
#[test]
fn answers_match_when_fed_back() {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let matched = std::cell::Cell::new(0u32);
    let cases = 96;
    // A fixed seed: the floor on how many generated hint sets match is a
    // statement about this sample, and must not depend on the run's luck.
    let mut runner = TestRunner::new_with_rng(
        Config::with_cases(cases),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    runner
        .run(&arb_hints(), |(v, h)| {
            if Registry::global().getinfo(&request(v, Some(&h))).is_ok() {
                matched.set(matched.get() + 1);
            }
            let failures = fed_back(v, Some(&h));
            prop_assert!(failures.is_empty(), "hints {h:?}:\n{}", failures.join("\n"));
            Ok(())
        })
        .unwrap();
    assert!(
        matched.get() >= cases / 4,
        "only {} of {cases} generated hint sets matched: the property says little",
        matched.get()
    );
}
