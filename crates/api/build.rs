//! Compiles `proto/scalebricks/v1/operator.proto` with protox (pure Rust: no system `protoc`)
//! and tonic's prost code generator.

fn main() {
    let proto = "proto/scalebricks/v1/operator.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"]).unwrap_or_else(|e| panic!("{proto}: {e}"));
    tonic_prost_build::configure()
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("generating the code of {proto}: {e}"));
}
