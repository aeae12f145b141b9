//! Lists the compiled-in providers and what they offer, as `fabric info`
//! does in short form.
//!
//! ```text
//! cargo run -p fabric --example info
//! ```
//!
//! Exits 0 when every entry names a compiled-in provider, 1 otherwise.

use fabric::prelude::*;

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("info: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let registry = Registry::global();
    let names: Vec<&str> = registry.providers().map(|p| p.name()).collect();
    println!("compiled-in providers, fastest first:");
    for p in registry.providers() {
        println!("    {} {}", p.name(), p.version());
    }

    // No hints: everything every provider offers here.
    let entries = getinfo(Version::CURRENT, None, None, GetinfoFlags::empty(), None)?;
    for info in &entries {
        let prov = info.prov_name().unwrap_or("?");
        if !names.contains(&prov) {
            return Err(Error::new(
                ErrorKind::Other,
                format!("an entry names provider `{prov}`, which is not compiled in"),
            ));
        }
        println!("provider: {prov}");
        println!(
            "    fabric: {}",
            info.fabric_attr.name.as_deref().unwrap_or("")
        );
        println!(
            "    domain: {}",
            info.domain_attr.name.as_deref().unwrap_or("")
        );
        println!("    version: {}", info.fabric_attr.prov_version);
        println!("    type: {}", info.ep_attr.ep_type);
        println!("    protocol: {}", info.ep_attr.protocol);
        println!("    caps: {}", info.caps);
    }
    println!("{} entries", entries.len());
    Ok(())
}
