//! `scalebricks gen --flows` without a cluster (pcap only, no root): the cluster's flows file
//! format (`ue,teid,enb,node`) is read by its first column.

use std::process::Command;

#[test]
fn gen_reads_the_cluster_flows_format() {
    let dir = tempfile::tempdir().unwrap();
    let flows = dir.path().join("flows.csv");
    std::fs::write(
        &flows,
        "ue,teid,enb,node\n100.64.0.7,305419896,192.0.2.9,2\n100.64.0.8,305419897,192.0.2.9,0\n",
    )
    .unwrap();
    let pcap = dir.path().join("t.pcap");
    let o = Command::new(env!("CARGO_BIN_EXE_scalebricks"))
        .args(["gen", "--dir"])
        .arg(dir.path().join("nowhere"))
        .arg("--flows")
        .arg(&flows)
        .args(["--count", "20", "--rate", "0", "--size", "128", "--pcap"])
        .arg(&pcap)
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let g: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(g["sent"].as_u64(), Some(20), "{g}");
    // Every frame goes to one of the two UE addresses: pcap header 24 bytes, then per frame a
    // 16-byte record header and the frame (IPv4 destination at offset 14 + 16).
    let bytes = std::fs::read(&pcap).unwrap();
    assert_eq!(bytes.len(), 24 + 20 * (16 + 128));
    for f in 0..20 {
        let at = 24 + f * (16 + 128) + 16 + 30;
        let dst = &bytes[at..at + 4];
        assert!(dst == [100, 64, 0, 7] || dst == [100, 64, 0, 8], "{dst:?}");
    }

    // A bad UE address names its line.
    std::fs::write(
        &flows,
        "ue,teid,enb,node\n100.64.0.7,1,192.0.2.9,2\n2001:db8::1,2,192.0.2.9,0\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_scalebricks"))
        .args(["gen", "--dir"])
        .arg(dir.path().join("nowhere"))
        .arg("--flows")
        .arg(&flows)
        .arg("--pcap")
        .arg(&pcap)
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("flows.csv:3:") && err.contains("not an IPv4 address"),
        "{err}"
    );
}
