//! Build script of fabric-sys.
//!
//! Without the `bindgen` feature it does nothing: the crate uses the
//! bindings committed in `src/gen/`. With it, the bindings are generated
//! from the system's rdma-core headers (found with pkg-config:
//! `libibverbs >= 1.14.44`, `librdmacm >= 1.3.44`, or the include folder in
//! `FABRIC_RDMA_CORE_DIR`) into `OUT_DIR`, and the crate uses those; when
//! `FABRIC_SYS_BINDINGS_OUT` names a file, the generated text is also
//! written there (that is how `cargo xtask gen-bindings` refreshes the
//! committed file).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "bindgen")]
    generate::run();
}

#[cfg(feature = "bindgen")]
mod generate {
    use std::path::PathBuf;

    /// The functions the run-time loader resolves: rdma-core 44 exports all
    /// of them. Everything else the crate calls is a `static inline` of the
    /// headers, written in Rust in `src/inline.rs`.
    const FUNCTIONS: &[&str] = &[
        // libibverbs
        "ibv_get_device_list",
        "ibv_free_device_list",
        "ibv_get_device_name",
        "ibv_get_device_guid",
        "ibv_open_device",
        "ibv_close_device",
        "ibv_query_device",
        "ibv_query_port",
        "ibv_query_gid",
        "_ibv_query_gid_ex",
        "ibv_query_pkey",
        "ibv_alloc_pd",
        "ibv_dealloc_pd",
        "ibv_reg_mr",
        "ibv_dereg_mr",
        "ibv_create_comp_channel",
        "ibv_destroy_comp_channel",
        "ibv_create_cq",
        "ibv_destroy_cq",
        "ibv_get_cq_event",
        "ibv_ack_cq_events",
        "ibv_create_srq",
        "ibv_destroy_srq",
        "ibv_create_qp",
        "ibv_modify_qp",
        "ibv_query_qp",
        "ibv_destroy_qp",
        "ibv_create_ah",
        "ibv_destroy_ah",
        "ibv_get_async_event",
        "ibv_ack_async_event",
        "ibv_wc_status_str",
        "ibv_port_state_str",
        "ibv_node_type_str",
        "ibv_event_type_str",
        "ibv_fork_init",
        // librdmacm
        "rdma_create_event_channel",
        "rdma_destroy_event_channel",
        "rdma_create_id",
        "rdma_destroy_id",
        "rdma_bind_addr",
        "rdma_resolve_addr",
        "rdma_resolve_route",
        "rdma_create_qp",
        "rdma_destroy_qp",
        "rdma_connect",
        "rdma_listen",
        "rdma_accept",
        "rdma_reject",
        "rdma_disconnect",
        "rdma_get_cm_event",
        "rdma_ack_cm_event",
        "rdma_event_str",
        "rdma_migrate_id",
        "rdma_set_option",
        "rdma_init_qp_attr",
        "rdma_get_devices",
        "rdma_free_devices",
        "rdma_get_src_port",
        "rdma_get_dst_port",
        "rdma_getaddrinfo",
        "rdma_freeaddrinfo",
    ];

    pub(super) fn run() {
        println!("cargo:rerun-if-env-changed=FABRIC_RDMA_CORE_DIR");
        println!("cargo:rerun-if-env-changed=FABRIC_SYS_BINDINGS_OUT");
        let mut includes: Vec<PathBuf> = Vec::new();
        if let Some(dir) = std::env::var_os("FABRIC_RDMA_CORE_DIR") {
            println!("cargo:rustc-env=FABRIC_SYS_IBVERBS_VERSION=unknown");
            includes.push(PathBuf::from(dir));
        } else {
            for (lib, min) in [("libibverbs", "1.14.44"), ("librdmacm", "1.3.44")] {
                let found = pkg_config::Config::new()
                    .atleast_version(min)
                    .cargo_metadata(false)
                    .probe(lib)
                    .unwrap_or_else(|e| {
                        panic!(
                            "fabric-sys (feature `bindgen`): {lib} >= {min} not found with pkg-config ({e}); \
                             install libibverbs-dev and librdmacm-dev, or set FABRIC_RDMA_CORE_DIR"
                        )
                    });
                if lib == "libibverbs" {
                    println!(
                        "cargo:rustc-env=FABRIC_SYS_IBVERBS_VERSION={}",
                        found.version
                    );
                }
                includes.extend(found.include_paths);
            }
        }
        let header = "#include <infiniband/verbs.h>\n#include <infiniband/ib.h>\n#include <rdma/rdma_cma.h>\n";
        let mut b = bindgen::Builder::default()
            .header_contents("fabric_sys_wrapper.h", header)
            .clang_args(includes.iter().map(|p| format!("-I{}", p.display())))
            .allowlist_type("_?ibv_.*")
            .allowlist_type("verbs_context")
            .allowlist_type("rdma_.*")
            .allowlist_type("sockaddr_ib")
            .allowlist_var("IBV_.*")
            .allowlist_var("RAI_.*")
            .allowlist_var("RDMA_.*")
            .allowlist_var("EAI_.*")
            // Standard C and socket types come from libc.
            .blocklist_type("sockaddr")
            .blocklist_type("sockaddr_in")
            .blocklist_type("sockaddr_in6")
            .blocklist_type("sockaddr_storage")
            .blocklist_type("in_addr")
            .blocklist_type("in6_addr")
            .blocklist_type("socklen_t")
            .blocklist_type("sa_family_t")
            .blocklist_type("in_port_t")
            .blocklist_type("pthread_mutex_t")
            .blocklist_type("pthread_cond_t")
            .blocklist_type("timespec")
            .blocklist_type("__socklen_t")
            .raw_line("use libc::{in6_addr, in_addr, in_port_t, pthread_cond_t, pthread_mutex_t, sa_family_t, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t, timespec};")
            .default_non_copy_union_style(bindgen::NonCopyUnionStyle::ManuallyDrop)
            .default_enum_style(bindgen::EnumVariation::ModuleConsts)
            .size_t_is_usize(true)
            .layout_tests(true)
            .derive_default(true)
            .derive_debug(false)
            .prepend_enum_name(false)
            .generate_comments(false)
            .dynamic_library_name("RdmaCore")
            .dynamic_link_require_all(true);
        for f in FUNCTIONS {
            b = b.allowlist_function(f);
        }
        let bindings = b
            .generate()
            .unwrap_or_else(|e| panic!("fabric-sys: bindgen failed: {e}"));
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
        let file = out.join("rdma_core.rs");
        bindings
            .write_to_file(&file)
            .unwrap_or_else(|e| panic!("fabric-sys: cannot write {}: {e}", file.display()));
        // The headers' data-path inlines in C, for the equivalence test.
        println!("cargo:rerun-if-changed=csrc/inline_shim.c");
        let mut c = cc::Build::new();
        c.file("csrc/inline_shim.c");
        for i in &includes {
            c.include(i);
        }
        c.compile("fabric_sys_inline_shim");
        if let Some(dest) = std::env::var_os("FABRIC_SYS_BINDINGS_OUT") {
            std::fs::copy(&file, &dest).unwrap_or_else(|e| {
                panic!("fabric-sys: cannot copy the bindings to {dest:?}: {e}")
            });
        }
    }
}
