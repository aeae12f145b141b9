//! Provider and name filters: the `FI_PROVIDER` variable, the
//! `fabric_attr.prov_name` hint, and the fabric / domain name hints.

use super::check::Mismatch;
use crate::info::Info;

/// The `FI_PROVIDER` filter: a comma-separated list of provider names,
/// compared case-insensitively; a leading `^` excludes the listed
/// providers instead. A layered name such as `tcp;ofi_rxm` selects its core
/// provider (`tcp`), whose native RDM endpoints take the place of
/// libfabric's rxm layer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProviderFilter {
    names: Vec<String>,
    exclude: bool,
}

fn core_name(entry: &str) -> &str {
    entry
        .split(';')
        .map(str::trim)
        .find(|p| !p.is_empty() && !p.starts_with("ofi_") && !p.starts_with('^'))
        .unwrap_or("")
}

impl ProviderFilter {
    /// Parses the variable's value; the empty string filters nothing.
    pub fn parse(spec: &str) -> Self {
        let spec = spec.trim();
        let (exclude, list) = match spec.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, spec),
        };
        let names = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.to_ascii_lowercase())
            .collect();
        ProviderFilter { names, exclude }
    }

    /// Whether the filter lets `provider` through.
    pub fn allows(&self, provider: &str) -> bool {
        if self.names.is_empty() {
            return true;
        }
        let listed = self
            .names
            .iter()
            .any(|n| core_name(n).eq_ignore_ascii_case(provider));
        listed != self.exclude
    }

    /// Names in the list that are not among `known` (to warn about).
    pub fn unknown<'a>(&'a self, known: &'a [&str]) -> impl Iterator<Item = &'a str> + 'a {
        self.names
            .iter()
            .map(|n| core_name(n))
            .filter(move |n| !known.iter().any(|k| k.eq_ignore_ascii_case(n)))
    }
}

/// Whether the `fabric_attr.prov_name` hint selects `provider`.
///
/// The hint is split on `;`. Entries starting with `^` exclude a provider;
/// `ofi_*` utility names are skipped (this library has no layering, its
/// providers offer RDM natively), and the remaining core name must equal
/// the provider's name, case-insensitively; no prefix matching. A hint that
/// is only exclusions selects every provider not excluded. `,` is not a
/// separator, as in libfabric.
pub fn prov_name_selects(hint: &str, provider: &str) -> bool {
    let parts: Vec<&str> = hint
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let mut wanted = None;
    for p in &parts {
        if let Some(ex) = p.strip_prefix('^') {
            if ex.eq_ignore_ascii_case(provider) {
                return false;
            }
        } else if wanted.is_none() && !p.to_ascii_lowercase().starts_with("ofi_") {
            wanted = Some(*p);
        }
    }
    match wanted {
        Some(w) => w.eq_ignore_ascii_case(provider),
        None => parts.iter().all(|p| p.starts_with('^')),
    }
}

/// The fabric and domain name hints: exact, case-insensitive (libfabric
/// 1.19 and later; 1.17's IP providers ignored them, against the man page).
pub fn names_match(info: &Info, hints: &Info) -> Result<(), Mismatch> {
    for (field, hint, have) in [
        (
            "fabric_attr.name",
            &hints.fabric_attr.name,
            &info.fabric_attr.name,
        ),
        (
            "domain_attr.name",
            &hints.domain_attr.name,
            &info.domain_attr.name,
        ),
    ] {
        if let Some(h) = hint {
            if !have.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(h)) {
                let short = field
                    .split_once('.')
                    .map_or(field, |(a, _)| a)
                    .trim_end_matches("_attr");
                return Err(Mismatch {
                    step: 10,
                    field,
                    reason: format!("{short} name `{h}` is not offered"),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fi_provider_syntax() {
        let f = ProviderFilter::parse("tcp,SHM");
        assert!(f.allows("tcp") && f.allows("shm") && !f.allows("verbs"));
        let f = ProviderFilter::parse("^tcp");
        assert!(!f.allows("tcp") && f.allows("shm"));
        let f = ProviderFilter::parse("tcp;ofi_rxm");
        assert!(f.allows("tcp") && !f.allows("shm"));
        let f = ProviderFilter::parse("^tcp,shm");
        assert!(!f.allows("tcp") && !f.allows("shm") && f.allows("verbs"));
        assert!(ProviderFilter::parse("").allows("tcp"));
        let f = ProviderFilter::parse("nosuch");
        assert!(!f.allows("tcp"));
        assert_eq!(f.unknown(&["tcp"]).collect::<Vec<_>>(), vec!["nosuch"]);
    }

    #[test]
    fn prov_name_hint() {
        assert!(prov_name_selects("tcp", "tcp"));
        assert!(prov_name_selects("TCP", "tcp"));
        assert!(!prov_name_selects("tc", "tcp"));
        assert!(prov_name_selects("tcp;ofi_rxm", "tcp"));
        assert!(prov_name_selects("ofi_rxm;tcp", "tcp"));
        assert!(!prov_name_selects("tcp,shm", "tcp"));
        assert!(!prov_name_selects("^tcp", "tcp"));
        assert!(prov_name_selects("^tcp", "shm"));
        assert!(!prov_name_selects("ofi_rxm", "tcp"));
    }
}
