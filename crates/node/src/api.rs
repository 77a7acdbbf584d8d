//! The node's side of the operator API ([`sb_api`], gRPC on the node's `grpc_addr`): a
//! [`sb_api::Backend`] over the node's tables and published state.
//!
//! - `Lookup` of a UE address reads the GPT (the handling node) and the FIB slice; of a TEID,
//!   the uplink table (then the FIB entry of its UE for the whole tunnel).
//! - `ListSessions` walks the FIB slice bucket by bucket (the page token names a bucket and
//!   how many of its entries were listed). Each bucket is read consistently, but the table
//!   keeps taking updates while a listing goes on: an entry inserted, removed or moved by the
//!   cuckoo table between two pages may be missed or listed twice; a table without updates
//!   in between is listed exactly once.
//! - `Stats` and `ClusterStatus` read what the workers and the control thread publish for the
//!   counters file and `/metrics` (the workers' counters are summed at the call, as for a
//!   scrape).
//!
//! Nothing here takes a lock a worker holds on its path: the tables are read through their
//! concurrent readers, the counters through the mutexes the workers publish into now and
//! then.

use sb_api::{pb, Cursor, Page};
use sb_engine::lte::{ue_key, Tunnel, KEY_BYTES};
use serde_json::Value;
use std::collections::HashMap;
use std::net::IpAddr;

/// A closure giving a JSON object.
pub type JsonFn = Box<dyn Fn() -> Value + Send + Sync>;

/// The node's backend of the operator API.
pub struct NodeApi {
    /// The node's index.
    pub node: u16,
    /// The GPT the workers read.
    pub gpt: Option<sb_engine::Gpt>,
    /// The FIB slice.
    pub fib: sb_cuckoo::Reader,
    /// The uplink table.
    pub uplink: sb_cuckoo::Reader,
    /// The counters, as the counters file has them.
    pub counters: JsonFn,
    /// The control plane's status (`sb_control::Status` as JSON) and `log_bytes`, as the
    /// counters file's `control` object has them.
    pub control: JsonFn,
}

/// The API tunnel of a FIB entry.
pub fn tunnel_pb(t: &Tunnel) -> pb::Tunnel {
    pb::Tunnel {
        ue_address: sb_api::ip_bytes(t.ue),
        teid: t.teid,
        enb_address: t.enb.octets().to_vec(),
        node: u32::from(t.node),
        qci: u32::from(t.qci),
        uplink_teid: t.uplink_teid(),
    }
}

fn entry_tunnel(key: &[u8], value: &[u8]) -> Option<pb::Tunnel> {
    let k: &[u8; KEY_BYTES] = key.try_into().ok()?;
    Some(tunnel_pb(&Tunnel::from_entry(k, value)))
}

/// Every number in `v`, by its dotted path (integers only; `true` is 1, `false` 0).
pub fn flatten(v: &Value) -> HashMap<String, u64> {
    fn walk(v: &Value, path: &mut String, out: &mut HashMap<String, u64>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(k);
                    walk(x, path, out);
                    path.truncate(len);
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!(".{i}"));
                    walk(x, path, out);
                    path.truncate(len);
                }
            }
            Value::Number(n) => {
                if let Some(n) = n.as_u64() {
                    out.insert(path.clone(), n);
                }
            }
            Value::Bool(b) => {
                out.insert(path.clone(), u64::from(*b));
            }
            _ => {}
        }
    }
    let mut out = HashMap::new();
    walk(v, &mut String::new(), &mut out);
    out
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

impl sb_api::Backend for NodeApi {
    fn node(&self) -> u32 {
        u32::from(self.node)
    }

    fn stats(&self) -> pb::StatsReply {
        let v = (self.counters)();
        pb::StatsReply {
            node: u32::from(self.node),
            counters: flatten(&v),
            json: v.to_string(),
        }
    }

    fn handling_node(&self, ue: IpAddr) -> Option<u32> {
        self.gpt.as_ref().map(|g| u32::from(g.lookup(&ue_key(ue))))
    }

    fn tunnel_of_ue(&self, ue: IpAddr) -> Option<pb::Tunnel> {
        let key = ue_key(ue);
        self.fib.lookup(&key).and_then(|v| entry_tunnel(&key, &v))
    }

    fn tunnel_of_teid(&self, teid: u32) -> Option<pb::Tunnel> {
        let v = self.uplink.lookup(&teid.to_be_bytes())?;
        let ue = v.get(..KEY_BYTES)?;
        // The whole tunnel from the FIB entry of the UE; the uplink entry alone has the UE
        // and the eNodeB.
        match self.fib.lookup(ue) {
            Some(f) => entry_tunnel(ue, &f).map(|mut t| {
                t.uplink_teid = teid;
                t
            }),
            None => {
                let k: &[u8; KEY_BYTES] = ue.try_into().ok()?;
                let enb = v.get(KEY_BYTES..KEY_BYTES + 4)?;
                Some(pb::Tunnel {
                    ue_address: sb_api::ip_bytes(sb_engine::lte::key_addr(k)),
                    enb_address: enb.to_vec(),
                    node: u32::from(self.node),
                    uplink_teid: teid,
                    ..Default::default()
                })
            }
        }
    }

    fn sessions(&self, from: Cursor, n: usize) -> Page {
        let nb = self.fib.buckets();
        let (mut b, mut skip) = (from.bucket as usize, from.skip as usize);
        let mut out = Vec::with_capacity(n);
        while b < nb && out.len() < n {
            let entries = self.fib.bucket_entries(b);
            let rest = &entries[skip.min(entries.len())..];
            let take = rest.len().min(n - out.len());
            out.extend(rest[..take].iter().filter_map(|(k, v)| entry_tunnel(k, v)));
            if take < rest.len() {
                skip += take;
                break;
            }
            b += 1;
            skip = 0;
        }
        Page {
            sessions: out,
            next: (b < nb).then_some(Cursor {
                bucket: b as u64,
                skip: skip as u32,
            }),
            total: self.fib.len() as u64,
        }
    }

    fn status(&self) -> pb::NodeStatus {
        let c = (self.control)();
        let st = &c["status"];
        pb::NodeStatus {
            node: u32::from(self.node),
            up: true,
            error: String::new(),
            ready: c["ready"].as_bool().unwrap_or(false),
            gpt_digest: st["gpt_digest"].as_str().unwrap_or_default().to_string(),
            epoch: u(&st["epoch"]),
            rib_keys: u(&st["rib_keys"]),
            fib_entries: u(&st["fib_entries"]),
            log_bytes: u(&c["log_bytes"]),
            owners: st["owners"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| pb::OwnerLag {
                    owner: u(&o["owner"]) as u32,
                    applied_seq: u(&o["applied_seq"]),
                    lag: u(&o["lag"]),
                    resyncs: u(&o["resyncs"]),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sb_api::Backend;
    use serde_json::json;
    use std::net::Ipv4Addr;

    fn api(entries: &[Tunnel]) -> NodeApi {
        let fib = sb_engine::fib::cuckoo_table_with_room(
            KEY_BYTES,
            sb_engine::lte::VALUE_BYTES,
            7,
            1000,
            entries
                .iter()
                .map(|t| (t.key(), t.value()))
                .collect::<Vec<_>>()
                .iter()
                .map(|(k, v)| (&k[..], &v[..])),
        )
        .unwrap();
        let up = sb_engine::fib::cuckoo_table_with_room(
            4,
            sb_engine::lte::UPLINK_VALUE_BYTES,
            7,
            1000,
            entries
                .iter()
                .map(|t| t.uplink_entry())
                .collect::<Vec<_>>()
                .iter()
                .map(|(k, v)| (&k[..], &v[..])),
        )
        .unwrap();
        NodeApi {
            node: 1,
            gpt: None,
            fib: fib.into_concurrent().1,
            uplink: up.into_concurrent().1,
            counters: Box::new(
                || json!({"engine": {"ports": {"ran": {"tx": 5}}}, "running": true}),
            ),
            control: Box::new(|| {
                json!({"status": {"gpt_digest": "ab", "epoch": 2, "owners": [{"owner": 0, "applied_seq": 9, "lag": 1, "resyncs": 0}]},
                       "log_bytes": 100, "ready": true})
            }),
        }
    }

    fn tunnels(n: u32) -> Vec<Tunnel> {
        (0..n)
            .map(|i| Tunnel {
                ue: IpAddr::V4(Ipv4Addr::from(0x6440_0000 + i)),
                teid: 0x100 + i,
                enb: Ipv4Addr::new(10, 2, 1, 2),
                node: 1,
                qci: 9,
                ul_teid: if i % 2 == 0 { 0 } else { 0x9000 + i },
                qfi: 0,
                rqi: false,
                policy: Default::default(),
                owner: 0,
            })
            .collect()
    }

    #[test]
    fn pages_list_every_entry_once_and_lookups_find_them() {
        let ts = tunnels(300);
        let a = api(&ts);
        for n in [1, 3, 64, 1000] {
            let mut cur = Cursor::default();
            let mut seen = std::collections::HashSet::new();
            loop {
                let p = a.sessions(cur, n);
                assert!(p.sessions.len() <= n);
                assert_eq!(p.total, 300);
                for t in p.sessions {
                    assert!(seen.insert(t.ue_address), "listed twice");
                }
                match p.next {
                    Some(c) => cur = c,
                    None => break,
                }
            }
            assert_eq!(seen.len(), 300, "page size {n}");
        }
        for t in &ts {
            let by_ue = a.tunnel_of_ue(t.ue).unwrap();
            assert_eq!(by_ue, tunnel_pb(t));
            let by_teid = a.tunnel_of_teid(t.uplink_teid()).unwrap();
            assert_eq!(by_teid, tunnel_pb(t));
        }
        assert!(a.tunnel_of_teid(0xdead).is_none());
        assert!(a
            .tunnel_of_ue(IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)))
            .is_none());
    }

    #[test]
    fn stats_and_status_come_from_the_published_json() {
        let a = api(&tunnels(3));
        let s = a.stats();
        assert_eq!(s.counters["engine.ports.ran.tx"], 5);
        assert_eq!(s.counters["running"], 1);
        let st = a.status();
        assert_eq!((st.ready, st.epoch, st.log_bytes), (true, 2, 100));
        assert_eq!(st.gpt_digest, "ab");
        assert_eq!(st.owners[0].lag, 1);
        let f = flatten(&json!({"a": [1, {"b": 2}], "c": -1, "d": "x"}));
        assert_eq!(f.len(), 2);
        assert_eq!((f["a.0"], f["a.1.b"]), (1, 2));
    }
}
