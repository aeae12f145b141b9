//! Debian's kernel for the guest: the package `linux-image-amd64` depends
//! on, fetched with `apt-get download`, unpacked with `dpkg -x` and indexed
//! with `depmod -b`. Only what the guest needs is cached, under
//! `target/rxe/kernel/<package>/`: `vmlinuz`, the wanted modules and their
//! dependencies in `modules/`, and their load order in `xtask-ready`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{find_program, run_quiet};

/// The meta package whose dependency names the current kernel.
const META: &str = "linux-image-amd64";

/// Written into a cache folder once it is complete: the version, the
/// wanted modules, then the module files in load order, one a line.
const READY: &str = "xtask-ready";

/// A cached kernel.
pub(super) struct Kernel {
    /// The package name, e.g. `linux-image-6.1.0-56-amd64`.
    pub(super) package: String,
    /// `uname -r` of the kernel, e.g. `6.1.0-56-amd64`.
    pub(super) version: String,
    pub(super) vmlinuz: PathBuf,
    /// Module files, each after its dependencies.
    pub(super) modules: Vec<PathBuf>,
}

/// The cached kernel with the `wanted` modules, fetched first when the
/// cache lacks the one Debian currently names. Offline, any cached kernel
/// with those modules does.
pub(super) fn prepare(rxe_dir: &Path, wanted: &[&str]) -> Result<Kernel, String> {
    let cache = rxe_dir.join("kernel");
    match current_package() {
        Ok(package) => match load(&cache.join(&package), wanted) {
            Some(k) => Ok(k),
            None => fetch(&package, &cache, wanted),
        },
        Err(e) => newest_cached(&cache, wanted)
            .ok_or_else(|| format!("{e}; and no kernel is cached under {}", cache.display())),
    }
}

/// Asks apt which package `linux-image-amd64` depends on, refreshing the
/// package lists once when they do not know it and we are root.
fn current_package() -> Result<String, String> {
    if let Some(p) = depends_of_meta() {
        return Ok(p);
    }
    if crate::is_root() {
        println!("rxe: apt does not know {META}; running apt-get update");
        run_quiet(Command::new("apt-get").args(["update", "-qq"]))?;
        if let Some(p) = depends_of_meta() {
            return Ok(p);
        }
    }
    Err(format!(
        "cannot find the kernel package: `apt-cache depends {META}` names no linux-image package (run `apt-get update`?)"
    ))
}

fn depends_of_meta() -> Option<String> {
    let out = Command::new("apt-cache")
        .args(["depends", META])
        .output()
        .ok()?;
    parse_depends(&String::from_utf8_lossy(&out.stdout))
}

/// The first `linux-image-*` dependency in `apt-cache depends` output.
fn parse_depends(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let line = line.trim().trim_start_matches('|');
        let name = line.strip_prefix("Depends:")?.trim();
        (name.starts_with("linux-image-") && !name.contains(char::is_whitespace))
            .then(|| name.to_string())
    })
}

/// A complete cache folder made for the same `wanted` modules, or `None`.
fn load(dir: &Path, wanted: &[&str]) -> Option<Kernel> {
    let ready = fs::read_to_string(dir.join(READY)).ok()?;
    let mut lines = ready.lines();
    let version = lines.next()?.to_string();
    if lines.next()? != wanted.join(",") {
        return None;
    }
    let modules: Vec<PathBuf> = lines.map(|m| dir.join("modules").join(m)).collect();
    let vmlinuz = dir.join("vmlinuz");
    let complete = vmlinuz.is_file() && modules.iter().all(|m| m.is_file());
    complete.then(|| Kernel {
        package: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        version,
        vmlinuz,
        modules,
    })
}

fn newest_cached(cache: &Path, wanted: &[&str]) -> Option<Kernel> {
    let mut found: Vec<Kernel> = fs::read_dir(cache)
        .ok()?
        .filter_map(|e| load(&e.ok()?.path(), wanted))
        .collect();
    found.sort_by(|a, b| a.package.cmp(&b.package));
    let k = found.pop()?;
    println!(
        "rxe: cannot ask apt for the current kernel; using the cached {}",
        k.package
    );
    Some(k)
}

fn fetch(package: &str, cache: &Path, wanted: &[&str]) -> Result<Kernel, String> {
    println!("rxe: fetching {package} (apt-get download, dpkg -x, depmod)");
    let work = cache.join(format!("{package}.partial"));
    remove_dir(&work)?;
    let unpacked = work.join("unpacked");
    create_dir(&unpacked)?;
    run_quiet(
        Command::new("apt-get")
            .args(["download", "-qq", package])
            .current_dir(&work),
    )?;
    let deb = find_deb(&work, package)?;
    run_quiet(Command::new("dpkg").arg("-x").arg(&deb).arg(&unpacked))?;
    let version = unpacked_version(&unpacked)?;
    let depmod = find_program("depmod")
        .ok_or("depmod not found (Debian package kmod: `apt-get install kmod`)".to_string())?;
    run_quiet(Command::new(depmod).arg("-b").arg(&unpacked).arg(&version))?;
    let modules_dir = modules_dir(&unpacked, &version)
        .ok_or_else(|| format!("{}: no lib/modules/{version}", unpacked.display()))?;

    // Keep only what the guest needs.
    let done = cache.join(package);
    remove_dir(&done)?;
    let keep = cache.join(format!("{package}.keep"));
    remove_dir(&keep)?;
    create_dir(&keep.join("modules"))?;
    let vmlinuz = unpacked.join("boot").join(format!("vmlinuz-{version}"));
    copy(&vmlinuz, &keep.join("vmlinuz"))?;
    let mut ready = format!("{version}\n{}\n", wanted.join(","));
    for rel in load_order(&modules_dir, wanted)? {
        let name = rel.rsplit('/').next().unwrap_or(&rel).to_string();
        copy(&modules_dir.join(&rel), &keep.join("modules").join(&name))?;
        ready.push_str(&name);
        ready.push('\n');
    }
    fs::write(keep.join(READY), ready)
        .map_err(|e| format!("cannot write to {}: {e}", keep.display()))?;
    fs::rename(&keep, &done).map_err(|e| format!("cannot rename {}: {e}", keep.display()))?;
    remove_dir(&work)?;
    load(&done, wanted).ok_or_else(|| format!("{}: cached kernel is incomplete", done.display()))
}

fn create_dir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

fn remove_dir(dir: &Path) -> Result<(), String> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("cannot remove {}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

fn modules_dir(root: &Path, version: &str) -> Option<PathBuf> {
    ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|d| root.join(d).join(version))
        .find(|d| d.is_dir())
}

fn find_deb(dir: &Path, package: &str) -> Result<PathBuf, String> {
    let prefix = format!("{package}_");
    fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .map(|n| n.to_string_lossy())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .ok_or_else(|| {
            format!(
                "apt-get download left no {prefix}*.deb in {}",
                dir.display()
            )
        })
}

/// The single version folder under `lib/modules` of an unpacked package.
fn unpacked_version(root: &Path) -> Result<String, String> {
    for d in ["lib/modules", "usr/lib/modules"] {
        if let Ok(entries) = fs::read_dir(root.join(d)) {
            let versions: Vec<String> = entries
                .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect();
            if let [v] = versions.as_slice() {
                return Ok(v.clone());
            }
            return Err(format!(
                "{}: expected one kernel version, found {versions:?}",
                root.join(d).display()
            ));
        }
    }
    Err(format!(
        "{}: no lib/modules in the kernel package",
        root.display()
    ))
}

/// Module files (relative to `modules_dir`) to load, each after its
/// dependencies. Modules built into the kernel are left out.
fn load_order(modules_dir: &Path, wanted: &[&str]) -> Result<Vec<String>, String> {
    let read = |name: &str| {
        let p = modules_dir.join(name);
        fs::read_to_string(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    let deps = parse_modules_dep(&read("modules.dep")?);
    let builtin = read("modules.builtin").unwrap_or_default();
    let builtin: BTreeSet<String> = builtin.lines().map(module_name).collect();
    resolve(&deps, &builtin, wanted)
}

/// `modules.dep`: module name -> (its path, the paths it depends on).
type DepMap = BTreeMap<String, (String, Vec<String>)>;

fn parse_modules_dep(text: &str) -> DepMap {
    text.lines()
        .filter_map(|line| {
            let (path, deps) = line.split_once(':')?;
            let deps = deps.split_whitespace().map(str::to_string).collect();
            Some((module_name(path), (path.to_string(), deps)))
        })
        .collect()
}

/// `kernel/drivers/net/dummy.ko` -> `dummy`; dashes count as underscores.
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split(".ko").next().unwrap_or(file);
    stem.replace('-', "_")
}

fn resolve(
    deps: &DepMap,
    builtin: &BTreeSet<String>,
    wanted: &[&str],
) -> Result<Vec<String>, String> {
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for name in wanted {
        let name = name.replace('-', "_");
        if deps.contains_key(&name) {
            visit(deps, &name, &mut seen, &mut order, 0)?;
        } else if !builtin.contains(&name) {
            return Err(format!(
                "kernel module {name} is neither in modules.dep nor built in"
            ));
        }
    }
    Ok(order)
}

fn visit(
    deps: &DepMap,
    name: &str,
    seen: &mut BTreeSet<String>,
    order: &mut Vec<String>,
    depth: usize,
) -> Result<(), String> {
    if depth > 64 {
        return Err(format!("modules.dep: dependency loop at {name}"));
    }
    if !seen.insert(name.to_string()) {
        return Ok(());
    }
    let (path, needs) = deps
        .get(name)
        .ok_or_else(|| format!("modules.dep names {name} but has no entry for it"))?;
    for dep in needs {
        visit(deps, &module_name(dep), seen, order, depth + 1)?;
    }
    if !path.ends_with(".ko") {
        return Err(format!(
            "{path}: compressed modules are not supported by the rig's insmod"
        ));
    }
    order.push(path.clone());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meta_package_names_its_kernel() {
        let text = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n";
        assert_eq!(
            parse_depends(text).as_deref(),
            Some("linux-image-6.1.0-56-amd64")
        );
        assert_eq!(parse_depends("linux-image-amd64\n"), None);
    }

    #[test]
    fn dependencies_load_first_and_once() -> Result<(), String> {
        let dep = "\
kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko: kernel/drivers/infiniband/core/ib_uverbs.ko kernel/drivers/infiniband/core/ib_core.ko kernel/net/ipv4/udp_tunnel.ko
kernel/drivers/infiniband/core/ib_uverbs.ko: kernel/drivers/infiniband/core/ib_core.ko
kernel/drivers/infiniband/core/ib_core.ko:
kernel/net/ipv4/udp_tunnel.ko:
kernel/drivers/net/dummy.ko:
";
        let deps = parse_modules_dep(dep);
        let builtin = BTreeSet::from(["configfs".to_string()]);
        let order = resolve(
            &deps,
            &builtin,
            &["dummy", "rdma-rxe", "ib_uverbs", "configfs"],
        )?;
        let names: Vec<String> = order.iter().map(|p| module_name(p)).collect();
        assert_eq!(
            names,
            ["dummy", "ib_core", "ib_uverbs", "udp_tunnel", "rdma_rxe"]
        );
        assert!(resolve(&deps, &builtin, &["nope"]).is_err());
        Ok(())
    }
}
