//! With the `bpf` feature: compiles bpf/fastpath.bpf.c and bpf/bench.bpf.c with clang for the
//! BPF target into OUT_DIR/{fastpath,bench}.bpf.o (the loader and `bench` embed them). Without it: nothing (the default build is
//! pure Rust).
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=bpf/fastpath.bpf.c");
    println!("cargo:rerun-if-changed=bpf/bench.bpf.c");
    println!("cargo:rerun-if-env-changed=CLANG");
    if std::env::var_os("CARGO_FEATURE_BPF").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    // The multiarch include directory holds asm/types.h, which linux/bpf.h includes.
    let multiarch = Command::new("gcc")
        .arg("-dumpmachine")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| format!("-I/usr/include/{}", s.trim()))
        .unwrap_or_else(|| "-I/usr/include/x86_64-linux-gnu".into());
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    for name in ["fastpath", "bench"] {
        let obj = out.join(format!("{name}.bpf.o"));
        let src = format!("bpf/{name}.bpf.c");
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-c"])
            .arg(&multiarch)
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => panic!("{clang} failed ({s}) on {src}"),
            Err(e) => panic!(
                "the `bpf` feature of sb-xdp needs clang and libbpf-dev ({e}): run scripts/install-bpf-tools.sh"
            ),
        }
    }
}
