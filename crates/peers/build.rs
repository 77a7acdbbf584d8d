//! Compiles the C/C++ shims of the peers whose cargo feature is on. Each shim file is compiled
//! only with its feature, so the default build needs no system package.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=csrc");
    if std::env::var_os("CARGO_FEATURE_DPDK").is_some() {
        let lib = pkg_config::Config::new()
            .statik(false)
            .probe("libdpdk")
            .expect("the `dpdk` feature needs Debian's libdpdk-dev (scripts/install-peers.sh)");
        let mut build = cc::Build::new();
        build.opt_level(3).flag("-march=native").warnings(false);
        for inc in &lib.include_paths {
            build.include(inc);
        }
        for f in ["csrc/dpdk_eal.c", "csrc/dpdk_efd.c", "csrc/dpdk_hash.c"] {
            if Path::new(f).exists() {
                build.file(f);
            }
        }
        build.compile("sb_dpdk_shim");
        // pkg-config already printed the link lines for libdpdk; the shim comes first.
    }
    if std::env::var_os("CARGO_FEATURE_LIBCUCKOO").is_some() {
        let f = "csrc/libcuckoo_shim.cpp";
        if Path::new(f).exists() {
            cc::Build::new()
                .cpp(true)
                .std("c++17")
                .opt_level(3)
                .flag("-march=native")
                .file(f)
                .compile("sb_libcuckoo_shim");
            println!("cargo:rustc-link-lib=pthread");
        }
    }
}
