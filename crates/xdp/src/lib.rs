//! The ScaleBricks fast path in XDP: the per-packet work of a node (parse, key, hash, GPT,
//! FIB, GTP-U) done in the kernel's XDP hook, with the user-space engine (`sb-engine`) as
//! the slow path for whatever the program cannot finish.
//!
//! - `bpf/fastpath.bpf.c`: the programs. `sb_inet` (downlink at `inet`): Ethernet/IPv4
//!   (no options, no fragments, header checksum checked, UDP/TCP headers checked as
//!   `sb_wire` does), the UE key (IPv4-mapped, as `sb_engine::lte::ue_key`), the key hash
//!   (`sb_common::hash128` for 16-byte keys, reimplemented with 32-bit multiplies), the GPT
//!   lookup over SetSep blocks in an array map (the fallback table in a hash map), then at
//!   the handling node the FIB (a hash map by 16-byte key) and GTP-U encapsulation (with the
//!   PDU Session Container when the value's QoS flow byte has bit 0x80) out of `ran`, or the
//!   fabric shim (`sb_engine::fabric`, kind Lookup, hops 1) out of `fabric`. `sb_ran` (uplink
//!   at `ran`): a G-PDU without options, TEID lookup in the uplink map, inner source = the
//!   UE, TTL, decapsulation out of `inet`; a GTP-U Echo Request (without extension headers or
//!   an N-PDU number) answered in place out of `ran` (redirected to `ran` itself: a veth does not kick its peer for `XDP_TX`), byte for byte as the engine
//!   answers it. `sb_fabric` (frames from the other nodes at `fabric`, sent to this node's
//!   fabric MAC): the shim checked as `sb_engine`'s `Engine::on_fabric` checks it; kind
//!   Transmit: the shim popped, out of `ran` with this node's MACs; kind Lookup: the FIB and
//!   the action as at `inet` (the IPv4 packet behind the shim checked as at `inet`, its upper
//!   layer not read, as the engine reads none there); frames without the shim (the node's
//!   own traffic: ARP, a control plane over the fabric's addresses) go to the kernel,
//!   uncounted, as without XDP. Everything else (ARP, IPv6, ICMP at
//!   `inet`, TTL <= 1, too big for the MTU, FIB or TEID misses, values with a policy (any of
//!   the FIB value's policy bytes 16..25 or its local slot 25..28 set), a GPT block being
//!   written, a shim the engine would refuse)
//!   goes to the slow path: `bpf_redirect_map` to the XSKMAP entry of the port and receive
//!   queue (`port * XSK_QUEUES + queue`, port 0 `inet`, 1 `ran`, 2 `fabric`: the engine over
//!   AF_XDP, `FastPath::set_slow_path_socket`), which is `XDP_PASS` (the kernel stack) when
//!   no socket is bound there, and for frames over 3,072 bytes. The program never drops.
//!
//!   The architecture is `sb_cfg`'s ([`Arch`], as `sb_engine::Arch`; `FastPath::load_arch`),
//!   and the programs follow the engine's choices for it exactly (same key hash, same nodes,
//!   same shim, hops and ingress), so that no packet changes behaviour between the engine
//!   and XDP (`tests/bpf.rs` compares them frame by frame under each):
//!   - ScaleBricks: as above, the GPT at `inet`; `sb_fib` holds the node's slice; a value
//!     whose egress is another node goes to the slow path (the engine's Transmit would be
//!     refused there);
//!   - full duplication: no GPT (the loader gets [`GptImage::none`] with the key-hash seed);
//!     `sb_fib` holds every entry; at `inet` the FIB lookup and the action, then out of
//!     `ran` (egress here) or over the fabric to the egress node (kind Transmit, hops 1, the
//!     outer source the egress node's `ran` address, as `sb_engine::lte` writes it), where
//!     `sb_fabric` transmits it;
//!   - hash partitioning: `sb_fib` holds the entries whose key hashes to the node; at `inet`
//!     the indirection node (`sb_engine::indirection_node` of the key's hash): here, the FIB
//!     and the action as under full duplication; another, the shim (kind Lookup, hops 1) to
//!     it, whose `sb_fabric` looks it up and sends it out of `ran` or on to the egress node
//!     (Transmit, hops 2). Counted `fabric_to_ran_2` when it leaves there.
//! - [`layout`]: the maps' byte layouts and what fills them (pure Rust, tested without BPF).
//! - `loader` (feature `bpf`): `FastPath` loads the object with aya, fills the maps, keeps
//!   them in step with the control plane (the writer API) and attaches the programs.
//! - `bench` (feature `bpf`): a traffic generator (live-frames `BPF_PROG_TEST_RUN`) and a
//!   counting sink in XDP, for measuring the programs through real veths.
//!
//! # Tables shared with the control plane
//! The GPT blocks live in an mmap'able array: the writer (`FastPath::apply_gpt_delta`) takes
//! a block's version word odd, writes the block (choices, records, its fallback entries), and
//! takes it even again; the program reads the version before and after its reads and sends
//! the packet to the slow path if it was odd or changed (the engine answers it from its own
//! live GPT, which holds the same content). The argument is the one of `sb_setsep::live`,
//! with x86-64's store and load ordering (TSO) in place of the fences: the program's loads
//! are plain loads with compiler barriers between them (BPF has load-acquire only from Linux
//! 6.15 and clang 18, which Debian 12 does not have), so the consistency argument holds on
//! x86-64 only. FIB and uplink entries are single hash-map updates, which the kernel makes
//! atomic for readers (`BPF_F_NO_PREALLOC`: a new element replaces the old under RCU), so no
//! reader sees half a value; the control plane's make-before-break order is unchanged (the
//! mirror is written in the same order, synchronously).
//!
//! # Cost
//! `scalebricks-bench io --engine --backend afpacket,xdp-fast` (sb-bench, feature `fastpath`)
//! measures `sb_inet` through veth pairs beside the engine on AF_PACKET.
#![cfg_attr(not(feature = "bpf"), forbid(unsafe_code))]

#[cfg(feature = "bpf")]
pub mod bench;
pub mod layout;
#[cfg(feature = "bpf")]
mod loader;

pub use layout::{Arch, BlockEdit, Counter, GptImage, LayoutError, NodeSetup};
#[cfg(feature = "bpf")]
pub use loader::{action, root_and_bpf, AttachMode, FastPath, Prog, TestRun, XdpError, XSK_QUEUES};
