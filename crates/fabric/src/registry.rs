//! The registry of compiled-in providers and the `getinfo` that asks them.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use fabric_core::matching::{ProviderFilter, names_match, prov_name_selects};
use fabric_core::objects::EnvVar;
use fabric_core::{Error, ErrorKind, GetinfoFlags, Info, Provider, Request, Result, Version};

/// The variables the registry itself reads.
pub const ENV_VARS: &[EnvVar] = &[EnvVar {
    name: "FI_PROVIDER",
    kind: "String",
    help: "Only use these providers: a comma-separated list (`tcp,shm`); a leading `^` excludes the listed providers instead (`^tcp`). Read once, at the first getinfo.",
}];

/// A set of providers, ordered fastest first, and the `FI_PROVIDER` filter.
pub struct Registry {
    providers: Vec<Box<dyn Provider>>,
    filter: ProviderFilter,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field(
                "providers",
                &self.providers.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .field("filter", &self.filter)
            .finish()
    }
}

/// The providers the enabled Cargo features compile in, in rank order
/// for local traffic: tcp, shm, verbs.
#[allow(unused_mut, clippy::vec_init_then_push)]
fn compiled_in() -> Vec<Box<dyn Provider>> {
    let mut v: Vec<Box<dyn Provider>> = Vec::new();
    #[cfg(feature = "tcp")]
    v.push(Box::new(prov_tcp::TcpProvider));
    #[cfg(feature = "shm")]
    v.push(Box::new(prov_shm::ShmProvider));
    #[cfg(feature = "verbs")]
    v.push(Box::new(prov_verbs::VerbsProvider));
    v
}

impl Registry {
    /// A registry of `providers` with `filter`; providers are ordered by
    /// [`Provider::rank`], then by the order given.
    pub fn new(providers: Vec<Box<dyn Provider>>, filter: ProviderFilter) -> Self {
        let mut providers = providers;
        providers.sort_by_key(|p| p.rank());
        Registry { providers, filter }
    }

    /// The process-wide registry: the compiled-in providers, filtered by
    /// the `FI_PROVIDER` variable as it was at the first call.
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let spec = std::env::var("FI_PROVIDER").unwrap_or_default();
            let filter = ProviderFilter::parse(&spec);
            let reg = Registry::new(compiled_in(), filter);
            let known: Vec<&str> = reg.providers.iter().map(|p| p.name()).collect();
            for name in reg.filter.unknown(&known) {
                tracing::warn!(name, compiled_in = ?known, "FI_PROVIDER names a provider that is not compiled in");
            }
            reg
        })
    }

    /// The providers, fastest first.
    pub fn providers(&self) -> impl Iterator<Item = &dyn Provider> {
        self.providers.iter().map(|p| p.as_ref())
    }

    /// The provider of that name (case-insensitive).
    pub fn provider(&self, name: &str) -> Option<&dyn Provider> {
        self.providers
            .iter()
            .map(|p| p.as_ref())
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// Opens the fabric of an entry `getinfo` returned (`fi_fabric`).
    pub fn fabric(&self, info: &Info) -> Result<Box<dyn fabric_core::objects::Fabric>> {
        let name = info
            .prov_name()
            .ok_or_else(|| Error::inval("the entry names no provider (fabric_attr.prov_name)"))?;
        let p = self
            .provider(name)
            .ok_or_else(|| Error::no_sys(format!("provider `{name}` is not compiled in")))?;
        p.fabric(&info.fabric_attr)
    }

    /// Every environment variable the registry and its providers read.
    pub fn env_vars(&self) -> Vec<EnvVar> {
        let mut v = ENV_VARS.to_vec();
        for p in &self.providers {
            v.extend_from_slice(p.env_vars());
        }
        v
    }

    /// Runs a `getinfo` request: validates it, asks every selected provider,
    /// stamps `prov_name`, `prov_version` and `api_version`, applies the
    /// fabric and domain name hints, and returns the answers fastest first.
    ///
    /// Errors: `NoSys` when no provider is compiled in (kfi_getinfo's
    /// meaning) or the version is too new; `NoData` naming why each
    /// provider declined when nothing matches; `Inval` / `BadFlags` for
    /// invalid requests (see [`Request::validate`]); a provider's own error
    /// (for example `Inval` for a malformed address) when no provider
    /// answered and one failed with something other than `NoData`.
    pub fn getinfo(&self, req: &Request<'_>) -> Result<Vec<Info>> {
        req.validate()?;
        if self.providers.is_empty() {
            return Err(Error::no_sys(
                "no provider is compiled in: enable a provider feature of the `fabric` crate (tcp, shm, verbs)",
            ));
        }
        if req.prov_attr_only() {
            return Ok(self
                .providers
                .iter()
                .map(|p| prov_only(p.as_ref(), req.version))
                .collect());
        }
        let mut out = Vec::new();
        // reason -> providers giving it, in rank order.
        let mut declined: BTreeMap<(u8, String, bool), Vec<&'static str>> = BTreeMap::new();
        let mut failure: Option<Error> = None;
        let hint_prov = req.hints.and_then(|h| h.fabric_attr.prov_name.as_deref());
        for p in &self.providers {
            let name = p.name();
            if !self.filter.allows(name) {
                declined
                    .entry((0, "FI_PROVIDER excludes".into(), false))
                    .or_default()
                    .push(name);
                continue;
            }
            if let Some(h) = hint_prov {
                if !prov_name_selects(h, name) {
                    declined
                        .entry((0, format!("prov_name `{h}` does not select"), false))
                        .or_default()
                        .push(name);
                    continue;
                }
            }
            if let Some(v) = req.hints.map(|h| h.fabric_attr.prov_version) {
                if !v.is_zero() && v > p.version() {
                    let reason = format!("fabric_attr.prov_version {v} is newer than offered");
                    declined.entry((2, reason, true)).or_default().push(name);
                    continue;
                }
            }
            match p.getinfo(req) {
                Ok(list) => {
                    let before = out.len();
                    for mut info in list {
                        info.fabric_attr.prov_name = Some(name.to_string());
                        info.fabric_attr.prov_version = p.version();
                        info.fabric_attr.api_version = req.version;
                        if let Some(h) = req.hints {
                            if let Err(m) = names_match(&info, h) {
                                declined.entry((1, m.reason, true)).or_default().push(name);
                                continue;
                            }
                        }
                        out.push(info);
                    }
                    if out.len() > before {
                        // A provider that answered is not "declined".
                        for v in declined.values_mut() {
                            v.retain(|n| *n != name);
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::NoData => {
                    tracing::debug!(provider = name, reason = e.detail(), "provider declined");
                    declined
                        .entry((2, e.detail().to_string(), true))
                        .or_default()
                        .push(name);
                }
                Err(e) => {
                    tracing::debug!(provider = name, error = ?e, "provider failed");
                    failure.get_or_insert(Error::new(e.kind(), format!("{name}: {}", e.detail())));
                }
            }
        }
        if !out.is_empty() {
            return Ok(out);
        }
        if let Some(e) = failure {
            return Err(e);
        }
        Err(Error::no_data(format!(
            "no provider matches these hints: {}",
            explain(&declined)
        )))
    }
}

fn prov_only(p: &dyn Provider, version: Version) -> Info {
    let mut info = Info::default();
    info.fabric_attr.prov_name = Some(p.name().to_string());
    info.fabric_attr.prov_version = p.version();
    info.fabric_attr.api_version = version;
    info
}

fn explain(declined: &BTreeMap<(u8, String, bool), Vec<&'static str>>) -> String {
    let mut parts: Vec<String> = declined
        .iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|((_, reason, by), names)| {
            let mut names = names.clone();
            names.dedup();
            let sep = if *by { " by " } else { " " };
            format!("{reason}{sep}{}", names.join(", "))
        })
        .collect();
    if parts.is_empty() {
        parts.push("no provider offered anything".into());
    }
    parts.join("; ")
}

/// `getinfo` on the [global](Registry::global) registry: every way to reach
/// `node` / `service` that the compiled-in providers offer for `hints`,
/// fastest first (fi_getinfo(3)).
///
/// Safe to call from many threads at once.
pub fn getinfo(
    version: Version,
    node: Option<&str>,
    service: Option<&str>,
    flags: GetinfoFlags,
    hints: Option<&Info>,
) -> Result<Vec<Info>> {
    Registry::global().getinfo(&Request {
        version,
        node,
        service,
        flags,
        hints,
    })
}
