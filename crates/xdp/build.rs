//! With the `bpf` feature: compiles bpf/fastpath.bpf.c with clang for the BPF target into
//! OUT_DIR/fastpath.bpf.o (the loader embeds it). Without it: nothing (the default build is
//! pure Rust).
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=bpf/fastpath.bpf.c");
    println!("cargo:rerun-if-env-changed=CLANG");
    if std::env::var_os("CARGO_FEATURE_BPF").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out.join("fastpath.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // The multiarch include directory holds asm/types.h, which linux/bpf.h includes.
    let multiarch = Command::new("gcc")
        .arg("-dumpmachine")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| format!("-I/usr/include/{}", s.trim()))
        .unwrap_or_else(|| "-I/usr/include/x86_64-linux-gnu".into());
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-c"])
        .arg(&multiarch)
        .arg("bpf/fastpath.bpf.c")
        .arg("-o")
        .arg(&obj)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{clang} failed ({s}) on bpf/fastpath.bpf.c"),
        Err(e) => panic!(
            "the `bpf` feature of sb-xdp needs clang and libbpf-dev ({e}): run scripts/install-bpf-tools.sh"
        ),
    }
}
