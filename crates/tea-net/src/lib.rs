//! TEA on the network (paper §4-5): the memory servers and the switch's data plane, on UDP.
//!
//! - [`server`]: a node registers the regions holding its part of the TEA table
//!   ([`sb_tea::TeaTable::region`]) and answers reads of (region, offset, length) by copying
//!   bytes, with the packet the request carried: no network-function logic, the stand-in for
//!   an RDMA NIC's one-sided reads, on [`sb_tea::wire`]'s RoCE-like header over UDP.
//! - [`switch`]: the switch's data plane, sans-IO: an engine [`App`](sb_engine::App) (one of
//!   `sb-nf`'s NFs) over the remote table, the hot-key cache in front, flow control and
//!   failover per range (primary, secondary), and the control plane's updates.
//! - [`driver`]: the switch core on a UDP socket.
//!
//! # In a cluster
//! `scalebricks cluster up --arch tea --nf nat|firewall|lb|vpn` runs these as processes: the
//! switch (`scalebricks tea-switch`) in the switch namespace builds the table, writes each
//! server's regions as a file ([`server::MemoryServer::image`]), reads over the fabric (the
//! bridge `br0`, from `10.0.0.254`) and takes packets in on its `wan` port and sends them out
//! on `lan` (AF_PACKET); a memory server (`scalebricks tea-server`) in each node's namespace
//! loads its image ([`server::MemoryServer::from_image`]) and answers on the node's fabric
//! address, UDP port 4791. The README's "TEA" paragraph shows the commands.
//!
//! # Bytes on the fabric
//! A read request carries the whole packet and the response brings it back with the bucket
//! (Figure 5b): `136 + B + 2P` bytes per read round for a `P`-byte packet and `B`-byte buckets
//! (Ethernet, IPv4, UDP and the RoCE-like headers both ways; [`switch`] has the details). These
//! figures are computed from the wire format, not measured; the switch counts the UDP payload
//! it sends and receives (`fabric_payload_bytes`, without the 84 bytes of Ethernet, IPv4 and
//! UDP headers per round). The
//! buckets (4 slots, a 20-byte header, padded to 8): NAT and LB (13-byte keys, 8-byte values)
//! `B` = 104, firewall (4-byte values) 88, VPN (8-byte keys, 10-byte values) 96. So a 64-byte
//! packet costs 368 bytes per round on the switch-server link (NAT, LB), 352 (firewall), 360
//! (VPN); a 1500-byte packet 3240, 3224, 3232. A key in its second bucket takes two rounds, a
//! miss three; the cache and the stash cost nothing on the fabric.
//!
//! # RDMA on this machine
//! Soft-RoCE (rxe) was looked for on the development machine (kernel 6.18, in a container):
//! the kernel has no loadable modules (`/proc/modules` and `/lib/modules` absent, no
//! `modprobe`), `/sys/class/infiniband` does not exist, and `rdma link` fails with "Failed to
//! open NETLINK_RDMA socket": no RDMA subsystem, so neither rxe nor siw. Nothing here depends
//! on it; the servers copy bytes in user space on a UDP socket, one thread each.
//!
//! # Updates
//! The control plane changes the servers' copies by one-sided writes ([`sb_tea::wire`]'s write
//! request, an RDMA WRITE's stand-in): [`switch::TeaSwitch::update`] places the entry in its
//! table, and sends each bucket it rewrote to the range's primary and secondary, one bucket at
//! a time, each once both copies acknowledged the last; lookups go on meanwhile (a bucket read
//! while it is stored has an odd version or a wrong checksum and is read again). A copy on a
//! dead server is skipped and rewritten whole when it answers again
//! ([`switch::TeaSwitch::resync`]). In a cluster, `scalebricks tea-insert` hands entries to
//! the running switch.
//!
//! # What is not built
//! - A late answer (after its read timed out) is dropped with its packet, although it carries
//!   the packet: the lookup state is gone by then.
//!
//! # Example: a NAT switch, one memory server, one translated packet
//! ```
//! use std::net::Ipv4Addr;
//! use sb_nf::nat::{Nat, NatConfig, Translation};
//! use sb_nf::flow::FlowKey;
//! use sb_tea::{Layout, RangeTable, TableParams, TeaTable};
//! use sb_tea_net::{driver::UdpSwitch, server, switch::{SwitchParams, TeaSwitch}};
//!
//! let layout = Layout::new(13, 8, 4).unwrap();
//! let mut table = TeaTable::new(TableParams::new(layout, RangeTable::even(64, &[0]).unwrap(), 1));
//! let mut mem = server::MemoryServer::new();
//! // The primary copy of region 0, served to requests carrying its access key.
//! mem.register(0, table.region(0)[0].clone(), table.access_key(0, 0)).unwrap();
//! let srv = server::spawn(mem, "127.0.0.1:0".parse().unwrap()).unwrap();
//!
//! let public = Ipv4Addr::new(198, 51, 100, 1);
//! let nat = Nat::new(NatConfig { public, ports: 1000..=2000, node: 0 }).unwrap();
//! let core = TeaSwitch::new(nat, &table, 1, SwitchParams::default()).unwrap();
//! let mut sw = UdpSwitch::new(core, "127.0.0.1:0".parse().unwrap(), vec![srv.addr]).unwrap();
//! let remote = Ipv4Addr::new(203, 0, 113, 9);
//! let key = FlowKey::new(17, remote, 53, public, 1500);
//! let host = Translation { addr: Ipv4Addr::new(10, 0, 0, 5), port: 5353, node: 0 };
//! sw.core_mut().insert(&mut table, &key.0, &host.value()).unwrap();
//!
//! let mac = sb_wire::EthernetAddress([2, 0, 0, 0, 0, 1]);
//! let b = sb_wire::PacketBuilder::udp(mac, mac, remote.into(), public.into(), 53, 1500);
//! let mut frame = vec![0u8; b.header_len() + 4];
//! b.build(b"data", &mut frame).unwrap();
//! let mut out = Vec::new();
//! sw.inject(&frame, &mut |f: &[u8]| out.push(f.to_vec()));
//! sw.drain(&mut |f: &[u8]| out.push(f.to_vec()), std::time::Duration::from_secs(2));
//! let p = sb_nf::flow::parse(&out[0]).unwrap();
//! assert_eq!((p.dst, p.dst_port), (host.addr, 5353));
//! srv.join();
//! ```

#![warn(missing_docs)]

pub mod driver;
pub mod server;
pub mod switch;
