//! The service over real TCP on 127.0.0.1: authentication (a call without the token never
//! reaches the backend), malformed requests, forwarding of lookups to the handling node,
//! paging, and the cluster status with a node that does not answer.

use sb_api::pb::{self, lookup_request::Key};
use sb_api::{Backend, Cursor, Page, ServerConfig};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tonic::Code;

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A node of a two-node cluster: UEs 100.64.0.x with x odd are node 1's, even node 0's; each
/// node's FIB holds its UEs 1..=250 in "buckets" of 7; TEID t is node (t % 2)'s.
struct Fake {
    node: u32,
    calls: AtomicU64,
}

fn ue(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(100, 64, 0, i))
}

impl Fake {
    fn tunnel(&self, i: u8) -> pb::Tunnel {
        pb::Tunnel {
            ue_address: sb_api::ip_bytes(ue(i)),
            teid: 0x1000 + u32::from(i),
            enb_address: vec![10, 2, 0, 2],
            node: self.node,
            qci: 9,
            uplink_teid: 0x2000 + u32::from(i),
        }
    }
    fn mine(&self) -> Vec<u8> {
        (1..=250u8)
            .filter(|i| u32::from(i % 2) == self.node)
            .collect()
    }
}

impl Backend for Fake {
    fn node(&self) -> u32 {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.node
    }
    fn stats(&self) -> pb::StatsReply {
        self.calls.fetch_add(1, Ordering::Relaxed);
        pb::StatsReply {
            node: self.node,
            counters: [("engine.ports.ran.tx".to_string(), 42)].into(),
            json: "{}".into(),
        }
    }
    fn handling_node(&self, ue: IpAddr) -> Option<u32> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        match ue {
            // The GPT's answer for a key it does not hold may name no node at all.
            IpAddr::V4(a) if a.octets()[3] == 255 => Some(7),
            IpAddr::V4(a) => Some(u32::from(a.octets()[3] % 2)),
            IpAddr::V6(_) => Some(0),
        }
    }
    fn tunnel_of_ue(&self, addr: IpAddr) -> Option<pb::Tunnel> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.mine()
            .into_iter()
            .find(|&i| ue(i) == addr)
            .map(|i| self.tunnel(i))
    }
    fn tunnel_of_teid(&self, teid: u32) -> Option<pb::Tunnel> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.mine()
            .into_iter()
            .find(|&i| 0x2000 + u32::from(i) == teid)
            .map(|i| self.tunnel(i))
    }
    fn sessions(&self, from: Cursor, n: usize) -> Page {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mine = self.mine();
        let buckets: Vec<&[u8]> = mine.chunks(7).collect();
        let mut out = Vec::new();
        let (mut b, mut skip) = (from.bucket as usize, from.skip as usize);
        while b < buckets.len() {
            let rest = &buckets[b][skip.min(buckets[b].len())..];
            let take = rest.len().min(n - out.len());
            out.extend(rest[..take].iter().map(|&i| self.tunnel(i)));
            if take < rest.len() {
                skip += take;
                break;
            }
            b += 1;
            skip = 0;
            if out.len() == n {
                break;
            }
        }
        Page {
            sessions: out,
            next: (b < buckets.len()).then_some(Cursor {
                bucket: b as u64,
                skip: skip as u32,
            }),
            total: mine.len() as u64,
        }
    }
    fn status(&self) -> pb::NodeStatus {
        self.calls.fetch_add(1, Ordering::Relaxed);
        pb::NodeStatus {
            node: self.node,
            up: true,
            ready: true,
            gpt_digest: "00aa".into(),
            owners: vec![pb::OwnerLag {
                owner: 0,
                applied_seq: 5,
                lag: 0,
                resyncs: 0,
            }],
            ..Default::default()
        }
    }
}

struct Cluster {
    addrs: Vec<SocketAddr>,
    backends: Vec<Arc<Fake>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Node 2's port: bound and listening, never accepting (dropping it would free the port
    /// for another test's server, which would answer).
    _dead: TcpListener,
}

impl Cluster {
    /// Two serving nodes, and a third address in the peer list where nothing answers.
    fn start() -> Cluster {
        let listeners: Vec<TcpListener> = (0..2)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let dead = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut addrs: Vec<SocketAddr> =
            listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        addrs.push(dead.local_addr().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let mut backends = Vec::new();
        let mut threads = Vec::new();
        for (node, l) in listeners.into_iter().enumerate() {
            let b = Arc::new(Fake {
                node: node as u32,
                calls: AtomicU64::new(0),
            });
            backends.push(b.clone());
            let cfg = ServerConfig {
                token: TOKEN.into(),
                peers: addrs.clone(),
            };
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                sb_api::serve(l, cfg, b, &stop).unwrap();
            }));
        }
        Cluster {
            addrs,
            backends,
            stop,
            threads,
            _dead: dead,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn calls_without_the_token_never_reach_the_backend() {
    let c = Cluster::start();
    rt().block_on(async {
        for token in ["", "wrong", &TOKEN[1..], &format!("{TOKEN}x")] {
            let mut cl = sb_api::connect(c.addrs[0], token).await.unwrap();
            let e = cl.stats(pb::StatsRequest {}).await.unwrap_err();
            assert_eq!(e.code(), Code::Unauthenticated, "{token:?}: {e}");
            let e = cl
                .lookup(pb::LookupRequest {
                    key: Some(Key::UeAddress(vec![100, 64, 0, 1])),
                    forwarded: false,
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::Unauthenticated);
        }
        // A plain client with no interceptor at all.
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", c.addrs[0]))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut bare = pb::operator_client::OperatorClient::new(ch);
        let e = bare
            .cluster_status(pb::ClusterStatusRequest { local_only: false })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
        assert!(e.message().contains("token"), "{e}");
    });
    for b in &c.backends {
        assert_eq!(b.calls.load(Ordering::Relaxed), 0);
    }
}

#[test]
fn malformed_requests_are_invalid_arguments() {
    let c = Cluster::start();
    rt().block_on(async {
        let mut cl = sb_api::connect(c.addrs[0], TOKEN).await.unwrap();
        let bad_lookups = [
            pb::LookupRequest {
                key: None,
                forwarded: false,
            },
            pb::LookupRequest {
                key: Some(Key::UeAddress(vec![1, 2, 3])),
                forwarded: false,
            },
            pb::LookupRequest {
                key: Some(Key::UeAddress(vec![])),
                forwarded: false,
            },
        ];
        for r in bad_lookups {
            let e = cl.lookup(r.clone()).await.unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{r:?}: {e}");
        }
        for (size, token) in [(sb_api::MAX_PAGE + 1, ""), (10, "nonsense"), (10, "1.x")] {
            let e = cl
                .list_sessions(pb::ListSessionsRequest {
                    page_size: size,
                    page_token: token.into(),
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{size} {token}: {e}");
        }
    });
}

#[test]
fn lookups_reach_the_handling_node() {
    let c = Cluster::start();
    rt().block_on(async {
        let mut cl = sb_api::connect(c.addrs[0], TOKEN).await.unwrap();
        // UE .7 is node 1's: node 0 passes the lookup on.
        let r = cl
            .lookup(pb::LookupRequest {
                key: Some(Key::UeAddress(vec![100, 64, 0, 7])),
                forwarded: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((r.handling_node, r.answered_by), (1, 1));
        assert_eq!(r.tunnel.unwrap().teid, 0x1007);
        // UE .8 is node 0's own.
        let r = cl
            .lookup(pb::LookupRequest {
                key: Some(Key::UeAddress(vec![100, 64, 0, 8])),
                forwarded: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!((r.handling_node, r.answered_by), (0, 0));
        // Not a flow: the handler says so.
        let e = cl
            .lookup(pb::LookupRequest {
                key: Some(Key::UeAddress(vec![100, 64, 1, 7])),
                forwarded: false,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{e}");
        let e = cl
            .lookup(pb::LookupRequest {
                key: Some(Key::UeAddress(vec![100, 64, 0, 255])),
                forwarded: false,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::NotFound, "{e}");
        // A TEID node 1 holds: asked of node 0, found by asking the others; the dead third
        // peer does not matter once one answered.
        let r = cl
            .lookup(pb::LookupRequest {
                key: Some(Key::Teid(0x2000 + 9)),
                forwarded: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.answered_by, 1);
        assert_eq!(r.tunnel.unwrap().ue_address, vec![100, 64, 0, 9]);
        // A TEID nobody holds, with a peer that does not answer: unavailable, saying which.
        let e = cl
            .lookup(pb::LookupRequest {
                key: Some(Key::Teid(0x9999)),
                forwarded: false,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert!(e.message().contains("node 2"), "{e}");
    });
}

#[test]
fn pages_list_every_entry_once() {
    let c = Cluster::start();
    rt().block_on(async {
        let mut cl = sb_api::connect(c.addrs[1], TOKEN).await.unwrap();
        for size in [1u32, 6, 7, 8, 100, 0] {
            let mut token = String::new();
            let mut got = Vec::new();
            let mut pages = 0;
            loop {
                let r = cl
                    .list_sessions(pb::ListSessionsRequest {
                        page_size: size,
                        page_token: token.clone(),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                let limit = if size == 0 {
                    sb_api::DEFAULT_PAGE
                } else {
                    size
                };
                assert!(r.sessions.len() <= limit as usize);
                assert_eq!(r.total, 125);
                got.extend(r.sessions.into_iter().map(|t| t.ue_address[3]));
                pages += 1;
                if r.next_page_token.is_empty() {
                    break;
                }
                token = r.next_page_token;
            }
            let want: Vec<u8> = (1..=250u8).filter(|i| i % 2 == 1).collect();
            assert_eq!(got, want, "page size {size}");
            let limit = if size == 0 {
                sb_api::DEFAULT_PAGE
            } else {
                size
            } as usize;
            assert_eq!(pages, 125usize.div_ceil(limit), "page size {size}");
        }
    });
}

#[test]
fn cluster_status_shows_a_silent_node_down() {
    let c = Cluster::start();
    rt().block_on(async {
        let mut cl = sb_api::connect(c.addrs[0], TOKEN).await.unwrap();
        let r = cl
            .cluster_status(pb::ClusterStatusRequest { local_only: false })
            .await
            .unwrap()
            .into_inner();
        let nodes: Vec<(u32, bool)> = r.nodes.iter().map(|n| (n.node, n.up)).collect();
        assert_eq!(nodes, vec![(0, true), (1, true), (2, false)]);
        assert!(!r.nodes[2].error.is_empty());
        assert!(!r.converged);
        let local = cl
            .cluster_status(pb::ClusterStatusRequest { local_only: true })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(local.nodes.len(), 1);
        assert!(local.converged);
        let s = cl.stats(pb::StatsRequest {}).await.unwrap().into_inner();
        assert_eq!(s.counters["engine.ports.ran.tx"], 42);
    });
}
