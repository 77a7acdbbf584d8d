// SPDX-License-Identifier: Apache-2.0 OR MIT
//
// The ScaleBricks fast path in XDP (crate sb-xdp; built with clang -target bpf by build.rs
// under the cargo feature `bpf`). What the programs cannot finish goes to the slow path: the
// XSKMAP entry of the receive queue (the engine over AF_XDP), or the kernel stack (XDP_PASS)
// when no socket is bound there. No packet is ever dropped here. The architecture (ScaleBricks,
// full duplication, hash partitioning) is sb_cfg's `arch`; the programs make the engine's
// choices under each (sb_engine's Engine::route, fib_stage, on_fabric).
//
// Map layouts are mirrored in src/layout.rs (offsets checked by the Rust tests and by the
// _Static_asserts below).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define GROUPS_PER_BLOCK 64
#define CHOICE_BYTES 64
// Group record bytes a block holds: 64 groups of at most 24 bytes (16+8 with up to 8 value
// bits), plus 8 bytes of slack so a 4-byte entry read never runs past the block.
#define MAX_REC 24
#define GROUP_BYTES (GROUPS_PER_BLOCK * MAX_REC + 8)

struct sb_block {
    __u32 version;  // odd while the writer is in the block (seqlock)
    __u32 pad;
    __u8 choices[CHOICE_BYTES];
    __u8 groups[GROUP_BYTES];
};
_Static_assert(sizeof(struct sb_block) == 1616, "sb_block layout");

struct sb_cfg {
    __u64 seed;
    __u64 n_blocks;
    __u32 node;
    __u32 nodes;
    __u32 xbits;
    __u32 ybits;
    __u32 vbits;
    __u32 rec;
    __u32 ran_mtu;
    __u32 ifindex_inet;
    __u32 ifindex_ran;
    __u32 ifindex_fabric;
    __u32 flags;  // CFG_READY: tables loaded
    __u32 arch;   // ARCH_*: sb_engine::Arch
    __u8 inet_mac[6];
    __u8 inet_peer[6];
    __u8 ran_mac[6];
    __u8 ran_peer[6];
    __u8 cand[256 * 4];  // sb_setsep::layout::CAND
};
_Static_assert(sizeof(struct sb_cfg) == 1112, "sb_cfg layout");
#define CFG_READY 1

// The architectures (sb_engine::Arch; src/layout.rs's Arch): ScaleBricks (GPT at ingress, the
// FIB slice at the handling node, at most one crossing), full duplication (the whole FIB at
// every node, no GPT: looked up at ingress, sent encapsulated to the egress node), hash
// partitioning (the FIB entries whose key hashes to the node: ingress -> indirection node ->
// egress node, up to two crossings).
#define ARCH_SB 0
#define ARCH_FULL_DUP 1
#define ARCH_HASH_PART 2

// sb_engine::Arch::max_hops.
static __always_inline __u32 max_hops(__u32 arch)
{
    return arch == ARCH_HASH_PART ? 2 : 1;
}

struct sb_node {
    __u8 fabric_mac[6];
    // The node standing in for this one while it is gone, plus one (0: none): the GPT's
    // answers naming this node go there (sb_control's stand-ins, issue 29).
    __u16 stand_in;
    __u32 ran_addr;  // network order
};
_Static_assert(sizeof(struct sb_node) == 12, "sb_node layout");

struct fb_key {
    __u64 lo;
    __u64 hi;
};

// Counters (per CPU); the order is src/layout.rs's Counter.
enum {
    C_RX_INET, C_RX_RAN, C_RX_FABRIC,
    C_TO_RAN, C_TO_FABRIC, C_UP_TO_INET, C_FABRIC_TO_RAN, C_ECHO,
    C_SLOW,
    C_SLOW_NOT_IP, C_SLOW_PARSE, C_SLOW_GROUP, C_SLOW_TTL, C_SLOW_GPT, C_SLOW_RETRY,
    C_SLOW_FIB_MISS, C_SLOW_POLICY, C_SLOW_MTU, C_SLOW_OTHER, C_SLOW_TEID_MISS,
    C_SLOW_UL_CHECK, C_SLOW_ICMP,
    C_FABRIC_TO_RAN_2,
    C_COUNT
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct sb_cfg);
} sb_cfg SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, struct sb_node);
} sb_nodes SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);  // set by the loader: the table's blocks
    __uint(map_flags, BPF_F_MMAPABLE);
    __type(key, __u32);
    __type(value, struct sb_block);
} sb_gpt SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, struct fb_key);
    __type(value, __u32);
} sb_gpt_fb SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1);  // set by the loader
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u8[16]);
    __type(value, __u8[32]);
} sb_fib SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1);  // set by the loader
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u8[4]);
    __type(value, __u8[24]);
} sb_uplink SEC(".maps");

// The slow path's AF_XDP sockets: entry port * XSK_QUEUES + receive queue, port 0 inet, 1 ran,
// 2 fabric (a socket receives only frames of its own interface and queue).
#define XSK_QUEUES 64
struct {
    __uint(type, BPF_MAP_TYPE_XSKMAP);
    __uint(max_entries, 3 * XSK_QUEUES);
    __type(key, __u32);
    __type(value, __u32);
} sb_xsks SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, C_COUNT);
    __type(key, __u32);
    __type(value, __u64);
} sb_stats SEC(".maps");

static __always_inline void count(__u32 c)
{
    __u64 *v = bpf_map_lookup_elem(&sb_stats, &c);
    if (v)
        *v += 1;
}

// The slow path's AF_XDP socket takes frames up to this size (a UMEM chunk holds them with
// room to spare); larger ones go up the kernel's path (where the node's AF_PACKET socket
// beside it takes them), as do all while the port's entry is empty.
#define XSK_MAX_FRAME 3072

static __always_inline int slow(struct xdp_md *ctx, __u32 why)
{
    count(C_SLOW);
    count(why);
    // The whole frame's length: a jumbo frame on a port with an MTU above a page comes in
    // several buffers (the programs are frags-aware, so they attach natively there), of
    // which data..data_end is the first.
    if (bpf_xdp_get_buff_len(ctx) > XSK_MAX_FRAME)
        return XDP_PASS;
    __u32 zero = 0, port = 0;
    struct sb_cfg *cfg = bpf_map_lookup_elem(&sb_cfg, &zero);
    if (cfg && ctx->ingress_ifindex == cfg->ifindex_ran)
        port = 1;
    else if (cfg && ctx->ingress_ifindex == cfg->ifindex_fabric)
        port = 2;
    __u32 q = ctx->rx_queue_index;
    if (q >= XSK_QUEUES)
        return XDP_PASS;
    return bpf_redirect_map(&sb_xsks, port * XSK_QUEUES + q, XDP_PASS);
}

// ---- the key hash: sb_common::hash128 for 16-byte keys --------------------------------------

#define K0 0xe220a8397b1dcdafULL
#define K1 0x6e789e6aa1b965f5ULL
#define K2 0x06c45d188009454fULL
#define K5 0x53cb9f0c747ea2ebULL
#define K7 0xc584133ac916ab3dULL
#define K9 0xf3b8488c368cb0a7ULL

// The full 128-bit product (no 128-bit multiply on BPF: four 32x32 products).
static __always_inline void mul128(__u64 a, __u64 b, __u64 *lo, __u64 *hi)
{
    __u64 al = (__u32)a, ah = a >> 32, bl = (__u32)b, bh = b >> 32;
    __u64 p0 = al * bl, p1 = al * bh, p2 = ah * bl, p3 = ah * bh;
    __u64 mid = (p0 >> 32) + (__u32)p1 + (__u32)p2;
    *lo = (mid << 32) | (__u32)p0;
    *hi = p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}

static __always_inline __u64 fold(__u64 a, __u64 b)
{
    __u64 l, h;
    mul128(a, b, &l, &h);
    return l ^ h;
}

static __always_inline __u64 mulhi(__u64 a, __u64 b)
{
    __u64 l, h;
    mul128(a, b, &l, &h);
    return h;
}

static __always_inline __u64 le64(const __u8 *k)
{
    __u64 x = 0;
#pragma unroll
    for (int i = 7; i >= 0; i--)
        x = (x << 8) | k[i];
    return x;
}

static __always_inline void hash16(const __u8 *key, __u64 seed, __u64 *lo, __u64 *hi)
{
    __u64 s = seed ^ K0 ^ 16;
    __u64 t = ((seed << 32) | (seed >> 32)) ^ K1;
    __u64 a = le64(key) ^ t, b = le64(key + 8) ^ s;
    __u64 x = a ^ fold(b, K9), y = b ^ fold(a, K7);
    *lo = fold(x ^ K2, y);
    *hi = fold(x, y ^ K5);
}

// ---- the GPT: sb_setsep's lookup over one block ----------------------------------------------

#define GPT_NONE (-1)   // no table, or a block past the map
#define GPT_RETRY (-2)  // the block was being written: ask the slow path

static __always_inline __u32 entry4(const __u8 *p)
{
    return (__u32)p[0] | (__u32)p[1] << 8 | (__u32)p[2] << 16 | (__u32)p[3] << 24;
}

static __always_inline int gpt_lookup(const struct sb_cfg *cfg, __u64 lo, __u64 hi)
{
    __u64 gb = mulhi(lo, cfg->n_blocks << 8);
    __u32 blk = gb >> 8, bkt = gb & 0xff;
    struct sb_block *b = bpf_map_lookup_elem(&sb_gpt, &blk);
    if (!b)
        return GPT_NONE;
    __u32 ver = *(volatile __u32 *)&b->version;
    if (ver & 1)
        return GPT_RETRY;
    asm volatile("" ::: "memory");
    __u8 cb = b->choices[(bkt >> 2) & 63];
    __u32 ch = (cb >> ((bkt & 3) * 2)) & 3;
    __u32 g = cfg->cand[((bkt & 0xff) << 2) | ch] & 63;
    __u32 xbits = cfg->xbits & 31, ybits = cfg->ybits & 31;
    __u32 eb = (xbits + ybits) >> 3;
    __u32 shift = ybits == 8 ? 29 : 28;  // 32 - log2(array bits)
    __u32 xmask = (1u << xbits) - 1, ymask = (ybits >= 32) ? ~0u : (1u << ybits) - 1;
    __u32 a = (__u16)hi, slope = (((__u32)(hi >> 32)) | 1) << 12;
    __u32 base = g * cfg->rec, vbits = cfg->vbits;
    int value = 0;
    for (__u32 j = 0; j < 16; j++) {
        if (j >= vbits)
            break;
        __u32 off = base + j * eb;
        if (off > GROUP_BYTES - 4)
            return GPT_NONE;
        __u32 w = entry4(&b->groups[off]);
        __u32 idx = w & xmask;
        if (j == 0 && idx == xmask) {
            struct fb_key k = {.lo = lo, .hi = hi};
            __u32 *fv = bpf_map_lookup_elem(&sb_gpt_fb, &k);
            value = fv ? (int)(*fv & 0xffff) : 0;
            break;
        }
        __u32 pos = ((a << 16) + idx * slope) >> shift;
        value |= (int)((((w >> xbits) & ymask) >> pos) & 1) << j;
    }
    asm volatile("" ::: "memory");
    if (*(volatile __u32 *)&b->version != ver)
        return GPT_RETRY;
    return value;
}

// ---- parsing --------------------------------------------------------------------------------

static __always_inline int ipv4_csum_ok(const __u8 *h)
{
    __u32 sum = 0;
#pragma unroll
    for (int i = 0; i < 20; i += 2)
        sum += (__u32)h[i] << 8 | h[i + 1];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return sum == 0xffff;
}

// Decrements the TTL of the IPv4 header at h, patching the checksum as sb_wire's
// Ipv4Packet::decrement_ttl does: HC' = ~(~HC + ~m + m').
static __always_inline void ipv4_dec_ttl(__u8 *h)
{
    __u32 old = (__u32)h[8] << 8 | h[9];
    h[8] -= 1;
    __u32 new = (__u32)h[8] << 8 | h[9];
    __u32 hc = (__u32)h[10] << 8 | h[11];
    __u64 sum = (__u64)(~hc & 0xffff) + (~old & 0xffff) + new;
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    __u16 c = ~(__u16)sum;
    h[10] = c >> 8;
    h[11] = c & 0xff;
}

static __always_inline __u16 ipv4_csum(const __u8 *h)
{
    __u32 sum = 0;
#pragma unroll
    for (int i = 0; i < 20; i += 2)
        if (i != 10)
            sum += (__u32)h[i] << 8 | h[i + 1];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return ~(__u16)sum;
}

// The IPv4 packet at ip (header checked: 0x45, total length tot within the frame, checksum,
// no fragment) carries an upper-layer header that sb_wire's parser accepts, and is not ICMP
// (ICMP errors and echo go to the slow path). 0: fast path may go on; else a slow reason.
static __always_inline int l4_ok(const __u8 *ip, __u32 tot, void *data_end)
{
    __u8 proto = ip[9];
    __u32 seg = tot - 20;
    const __u8 *l4 = ip + 20;
    if (proto == 17) {
        if (seg < 8 || (void *)(l4 + 8) > data_end)
            return C_SLOW_PARSE;
        __u32 ulen = (__u32)l4[4] << 8 | l4[5];
        if (ulen < 8 || ulen > seg)
            return C_SLOW_PARSE;
    } else if (proto == 6) {
        if (seg < 20 || (void *)(l4 + 20) > data_end)
            return C_SLOW_PARSE;
        __u32 doff = (__u32)(l4[12] >> 4) * 4;
        if (doff < 20 || doff > seg)
            return C_SLOW_PARSE;
    } else if (proto == 1 || proto == 58) {
        return C_SLOW_ICMP;
    }
    return 0;
}

// Checks the IPv4 header at ip whose packet may extend to limit bytes: 0 and *tot set, or a
// slow reason.
static __always_inline int ipv4_ok(const __u8 *ip, __u32 limit, void *data_end, __u32 *tot)
{
    if ((void *)(ip + 20) > data_end)
        return C_SLOW_PARSE;
    if (ip[0] != 0x45)
        return C_SLOW_PARSE;  // another version, options
    __u32 t = (__u32)ip[2] << 8 | ip[3];
    if (t < 20 || t > limit)
        return C_SLOW_PARSE;
    if (!ipv4_csum_ok(ip))
        return C_SLOW_PARSE;
    if ((ip[6] & 0x3f) || ip[7])
        return C_SLOW_PARSE;  // a fragment (MF or an offset)
    *tot = t;
    return 0;
}

static __always_inline void copy6(__u8 *d, const __u8 *s)
{
#pragma unroll
    for (int i = 0; i < 6; i++)
        d[i] = s[i];
}

// ---- downlink: the FIB action at the handling node --------------------------------------------

// Hash partitioning's indirection node of a key (sb_engine::indirection_node): a
// multiply-shift of a mix of both hash halves.
static __always_inline __u32 indirection_node(__u64 lo, __u64 hi, __u32 nodes)
{
    __u64 x = (hi ^ ((lo << 29) | (lo >> 35))) * 0x9e3779b97f4a7c15ULL;
    return (__u32)mulhi(x, nodes);
}

// What the engine's FIB stage and Lte::apply decide for the FIB value v of an IPv4 packet of
// tot bytes that crossed the fabric `hops` times so far: 0 and *egress (this node: out of
// ran; another: encapsulated here and sent to it over the fabric, kind Transmit), or a slow
// reason. Nothing is changed.
static __always_inline int value_ok(const struct sb_cfg *cfg, const __u8 *v, __u32 tot,
                                    __u32 hops, __u32 *egress)
{
    // Bytes 16..25: the session's policy (MBRs, flags); 25..28: the local policy slot. The
    // engine enforces a policy through its slot only, but a value with any of these bytes
    // set goes to the slow path all the same: this program enforces none of them.
    if (*(const __u64 *)(v + 16) || *(const __u32 *)(v + 24))
        return C_SLOW_POLICY;
    if (!*(const __u32 *)(v + 4))
        return C_SLOW_OTHER;  // no downlink tunnel
    __u32 over = (v[15] & 0x80) ? 44 : 36;
    if (tot + over > cfg->ran_mtu)
        return C_SLOW_MTU;
    __u32 e = (__u32)v[8] << 8 | v[9];
    // Another egress node: over the fabric where the architecture allows one more crossing
    // (ScaleBricks' handling node is the egress node; the engine's Transmit to another one
    // would be refused there: the slow path's to answer).
    if (e != cfg->node &&
        (cfg->arch == ARCH_SB || e >= cfg->nodes || hops >= max_hops(cfg->arch)))
        return C_SLOW_OTHER;
    *egress = e;
    return 0;
}

// The outer IPv4, UDP and GTP-U headers (and the PDU Session Container when qf has bit 0x80)
// at o, for an inner packet of tot bytes: as sb_wire's GtpuTunnel::encap_in_place writes them
// (DF, identification 0, TTL 64). False if the frame is shorter than the headers.
static __always_inline int write_tunnel(__u8 *o, void *end, __u32 tot, __u8 qf, __u32 src,
                                        __u32 enb, const __u8 *teid)
{
    if ((void *)(o + 44) > end)
        return 0;
    __u32 over = (qf & 0x80) ? 44 : 36;
    __u32 otot = tot + over;
    o[0] = 0x45;
    o[1] = 0;
    o[2] = otot >> 8;
    o[3] = otot & 0xff;
    o[4] = 0;
    o[5] = 0;
    o[6] = 0x40;  // DF
    o[7] = 0;
    o[8] = 64;
    o[9] = 17;
    o[10] = 0;
    o[11] = 0;
    *(__u32 *)(o + 12) = src;
    *(__u32 *)(o + 16) = enb;
    __u16 c = ipv4_csum(o);
    o[10] = c >> 8;
    o[11] = c & 0xff;
    __u8 *u = o + 20;
    __u32 ulen = otot - 20;
    u[0] = 2152 >> 8;
    u[1] = 2152 & 0xff;
    u[2] = 2152 >> 8;
    u[3] = 2152 & 0xff;
    u[4] = ulen >> 8;
    u[5] = ulen & 0xff;
    u[6] = 0;
    u[7] = 0;
    __u8 *g = u + 8;
    __u32 glen = ulen - 16;  // bytes after the mandatory GTP-U header
    g[0] = (qf & 0x80) ? 0x34 : 0x30;
    g[1] = 0xff;
    g[2] = glen >> 8;
    g[3] = glen & 0xff;
    g[4] = teid[0];
    g[5] = teid[1];
    g[6] = teid[2];
    g[7] = teid[3];
    if (qf & 0x80) {
        g[8] = 0;
        g[9] = 0;
        g[10] = 0;
        g[11] = 0x85;
        g[12] = 1;
        g[13] = 0;  // DL PDU SESSION INFORMATION
        g[14] = qf & 0x7f;  // RQI << 6 | QFI
        g[15] = 0;
    }
    return 1;
}

// Encapsulates the IPv4 packet of tot bytes at offset ip_off of the frame (14: a frame from
// inet; 20: a fabric Lookup frame, behind the shim; the frame ends at ip_off + tot after
// this) as the FIB value v says (value_ok passed: egress), its outer source the egress node's
// ran address (Lte::apply), and sends it out of ran with this node's MACs (egress = this node;
// counted as `done`) or over the fabric to the egress node with the shim (kind Transmit, hops
// + 1, ingress; counted as C_TO_FABRIC). Returns the XDP action, or -reason for the slow path
// (nothing changed then).
static __always_inline int encap(struct xdp_md *ctx, const struct sb_cfg *cfg, const __u8 *v,
                                 __u32 tot, const __u32 ip_off, __u32 egress, __u32 hops,
                                 __u32 ingress, __u32 done)
{
    __u32 me = cfg->node;
    int to_fabric = egress != me;
    struct sb_node *ne = bpf_map_lookup_elem(&sb_nodes, &egress);
    struct sb_node *ns = bpf_map_lookup_elem(&sb_nodes, &me);
    if (!ne || !ns)
        return -C_SLOW_OTHER;
    __u8 qf = v[15];
    __u32 over = (qf & 0x80) ? 44 : 36;
    __u32 src = ne->ran_addr, enb = *(const __u32 *)(v + 4);
    __u8 teid[4] = {v[0], v[1], v[2], v[3]};

    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    __u8 *ip = (__u8 *)data + ip_off;
    if ((void *)(ip + 20) > end)
        return -C_SLOW_PARSE;
    if (ip[8] <= 1)
        return -C_SLOW_TTL;
    ipv4_dec_ttl(ip);
    __u32 len = (__u32)(end - data);
    if (len > ip_off + tot && bpf_xdp_adjust_tail(ctx, (int)(ip_off + tot) - (int)len))
        return XDP_ABORTED;
    __u32 hl = to_fabric ? 20 : 14;
    if (bpf_xdp_adjust_head(ctx, (int)ip_off - (int)(hl + over)))
        return XDP_ABORTED;
    data = (void *)(long)ctx->data;
    end = (void *)(long)ctx->data_end;
    __u8 *h = data;
    if ((void *)(h + 20) > end)
        return XDP_ABORTED;
    if (to_fabric) {
        copy6(h, ne->fabric_mac);
        copy6(h + 6, ns->fabric_mac);
        h[12] = 0x88;
        h[13] = 0xb5;
        h[14] = 0x12;  // version 1, kind Transmit
        h[15] = hops + 1;
        h[16] = ingress >> 8;
        h[17] = ingress & 0xff;
        h[18] = 0x08;
        h[19] = 0x00;
        if (!write_tunnel(h + 20, end, tot, qf, src, enb, teid))
            return XDP_ABORTED;
        count(C_TO_FABRIC);
        return bpf_redirect(cfg->ifindex_fabric, 0);
    }
    copy6(h, cfg->ran_peer);
    copy6(h + 6, cfg->ran_mac);
    h[12] = 0x08;
    h[13] = 0x00;
    if (!write_tunnel(h + 14, end, tot, qf, src, enb, teid))
        return XDP_ABORTED;
    count(done);
    return bpf_redirect(cfg->ifindex_ran, 0);
}

SEC("xdp.frags")
int sb_inet(struct xdp_md *ctx)
{
    __u32 zero = 0;
    struct sb_cfg *cfg = bpf_map_lookup_elem(&sb_cfg, &zero);
    if (!cfg || !(cfg->flags & CFG_READY) || cfg->arch > ARCH_HASH_PART)
        return slow(ctx, C_SLOW_OTHER);
    count(C_RX_INET);
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    __u8 *eth = data;
    if ((void *)(eth + 14) > end)
        return slow(ctx, C_SLOW_PARSE);
    if (eth[0] & 1)
        return slow(ctx, C_SLOW_GROUP);
    if (eth[12] != 0x08 || eth[13] != 0x00)
        return slow(ctx, C_SLOW_NOT_IP);
    __u8 *ip = eth + 14;
    __u32 len = (__u32)(end - data), tot = 0;
    int r = ipv4_ok(ip, len - 14, end, &tot);
    if (r)
        return slow(ctx, r);
    r = l4_ok(ip, tot, end);
    if (r)
        return slow(ctx, r);
    if ((ip[16] & 0xf0) == 0xe0 || *(__u32 *)(ip + 16) == 0xffffffff)
        return slow(ctx, C_SLOW_GROUP);
    if (ip[8] <= 1)
        return slow(ctx, C_SLOW_TTL);
    __u8 key[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[16], ip[17], ip[18], ip[19]};
    // Where the key's FIB entry is (sb_engine's Engine::route): here (full duplication), at
    // its indirection node (hash partitioning), or at the node the GPT names (ScaleBricks);
    // the last two from the key's hash (sb_common::hash128 with the cluster's seed).
    __u32 to;
    __u64 lo, hi;
    if (cfg->arch == ARCH_FULL_DUP) {
        to = cfg->node;
    } else if (cfg->arch == ARCH_HASH_PART) {
        hash16(key, cfg->seed, &lo, &hi);
        to = indirection_node(lo, hi, cfg->nodes);
    } else {
        hash16(key, cfg->seed, &lo, &hi);
        int g = gpt_lookup(cfg, lo, hi);
        if (g == GPT_RETRY)
            return slow(ctx, C_SLOW_RETRY);
        if (g < 0 || (__u32)g >= cfg->nodes)
            return slow(ctx, C_SLOW_GPT);
        to = g;
    }
    // The handler's sb_nodes entry, looked up once: its fabric MAC, and under ScaleBricks the
    // node standing in for it while it is gone (as the engine's LiveSetSep redirects the
    // GPT's answers; a node never stands in for itself, so the local case needs no lookup).
    __u32 me = cfg->node, dst = to;
    struct sb_node *nd = 0;
    if (dst != me) {
        nd = bpf_map_lookup_elem(&sb_nodes, &dst);
        if (nd && nd->stand_in && cfg->arch == ARCH_SB) {
            dst = nd->stand_in - 1;
            if (dst >= cfg->nodes)
                return slow(ctx, C_SLOW_GPT);
            nd = dst == me ? 0 : bpf_map_lookup_elem(&sb_nodes, &dst);
        }
    }
    if (dst == me) {
        __u8 *v = bpf_map_lookup_elem(&sb_fib, key);
        if (!v)
            return slow(ctx, C_SLOW_FIB_MISS);
        __u32 egress = 0;
        r = value_ok(cfg, v, tot, 0, &egress);
        if (r)
            return slow(ctx, r);
        r = encap(ctx, cfg, v, tot, 14, egress, 0, cfg->node, C_TO_RAN);
        if (r < 0)
            return slow(ctx, -r);
        return r;
    }
    // Another node looks it up: the fabric shim (kind Lookup, hops 1, ingress = this node).
    struct sb_node *ns = bpf_map_lookup_elem(&sb_nodes, &me);
    if (!nd || !ns)
        return slow(ctx, C_SLOW_OTHER);
    if (bpf_xdp_adjust_head(ctx, -6))
        return slow(ctx, C_SLOW_OTHER);
    data = (void *)(long)ctx->data;
    end = (void *)(long)ctx->data_end;
    __u8 *h = data;
    if ((void *)(h + 20) > end)
        return XDP_ABORTED;
    copy6(h, nd->fabric_mac);
    copy6(h + 6, ns->fabric_mac);
    h[12] = 0x88;
    h[13] = 0xb5;
    h[14] = 0x11;  // version 1, kind Lookup
    h[15] = 1;     // hops
    h[16] = me >> 8;
    h[17] = me & 0xff;
    count(C_TO_FABRIC);
    return bpf_redirect(cfg->ifindex_fabric, 0);
}

// ---- at fabric: frames from the other nodes ---------------------------------------------------

// A frame from another node (sb_engine's Engine::on_fabric): the shim checked as the engine
// checks it (version 1; kind Lookup under ScaleBricks, Transmit under full duplication, either
// under hash partitioning; 1 <= hops <= the architecture's most; ingress a node), sent to this
// node's fabric MAC (others go to the slow path; frames without the shim to the kernel). Transmit: the
// shim popped, this node's ran MACs, out of ran. Lookup: the IPv4 packet behind the shim
// (checked as at inet, without the upper layer, which the engine does not read here), the FIB
// lookup and the action as at inet: out of ran, or (hash partitioning) encapsulated on to the
// egress node. Counted C_FABRIC_TO_RAN after one crossing, C_FABRIC_TO_RAN_2 after two.
SEC("xdp.frags")
int sb_fabric(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    __u8 *h = data;
    // Frames without the shim are the node's own (ARP, its control plane, which may run over
    // the fabric's addresses): the kernel's, as without XDP (the engine drops them, Host),
    // neither counted nor handed to an AF_XDP socket.
    if ((void *)(h + 14) > end || h[12] != 0x88 || h[13] != 0xb5)
        return XDP_PASS;
    __u32 zero = 0;
    struct sb_cfg *cfg = bpf_map_lookup_elem(&sb_cfg, &zero);
    if (!cfg || !(cfg->flags & CFG_READY) || cfg->arch > ARCH_HASH_PART)
        return slow(ctx, C_SLOW_OTHER);
    count(C_RX_FABRIC);
    if ((void *)(h + 20) > end)
        return slow(ctx, C_SLOW_PARSE);
    if (h[0] & 1)
        return slow(ctx, C_SLOW_GROUP);
    __u32 me = cfg->node;
    struct sb_node *ns = bpf_map_lookup_elem(&sb_nodes, &me);
    if (!ns)
        return slow(ctx, C_SLOW_OTHER);
#pragma unroll
    for (int i = 0; i < 6; i++)
        if (h[i] != ns->fabric_mac[i])
            return slow(ctx, C_SLOW_OTHER);  // another node's
    __u32 kind = h[14] & 0xf, hops = h[15], ingress = (__u32)h[16] << 8 | h[17];
    __u32 arch = cfg->arch;
    int valid = (h[14] >> 4) == 1 &&
                ((arch == ARCH_SB && kind == 1) || (arch == ARCH_FULL_DUP && kind == 2) ||
                 (arch == ARCH_HASH_PART && (kind == 1 || kind == 2))) &&
                hops >= 1 && hops <= max_hops(arch) && ingress < cfg->nodes;
    if (!valid)
        return slow(ctx, C_SLOW_PARSE);
    __u32 done = hops >= 2 ? C_FABRIC_TO_RAN_2 : C_FABRIC_TO_RAN;
    __u32 len = (__u32)(end - data);
    if (kind == 2) {
        // Transmit: what remains is the frame without the shim, with this node's MACs; one
        // longer than the ran MTU is the slow path's (Lte::split cuts or refuses it).
        if (len - 6 > 14 + cfg->ran_mtu)
            return slow(ctx, C_SLOW_MTU);
        if (bpf_xdp_adjust_head(ctx, 6))
            return slow(ctx, C_SLOW_OTHER);
        data = (void *)(long)ctx->data;
        end = (void *)(long)ctx->data_end;
        h = data;
        if ((void *)(h + 14) > end)
            return XDP_ABORTED;
        copy6(h, cfg->ran_peer);
        copy6(h + 6, cfg->ran_mac);
        count(done);
        return bpf_redirect(cfg->ifindex_ran, 0);
    }
    // Lookup.
    if (h[18] != 0x08 || h[19] != 0x00)
        return slow(ctx, C_SLOW_NOT_IP);
    __u8 *ip = h + 20;
    __u32 tot = 0;
    int r = ipv4_ok(ip, len - 20, end, &tot);
    if (r)
        return slow(ctx, r);
    if (ip[8] <= 1)
        return slow(ctx, C_SLOW_TTL);
    // (The FIB map hashes the key itself: sb_common's hash is not needed here.)
    __u8 key[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ip[16], ip[17], ip[18], ip[19]};
    __u8 *v = bpf_map_lookup_elem(&sb_fib, key);
    if (!v)
        return slow(ctx, C_SLOW_FIB_MISS);
    __u32 egress = 0;
    r = value_ok(cfg, v, tot, hops, &egress);
    if (r)
        return slow(ctx, r);
    r = encap(ctx, cfg, v, tot, 20, egress, hops, ingress, done);
    if (r < 0)
        return slow(ctx, -r);
    return r;
}

// ---- uplink at ran ----------------------------------------------------------------------------

// A GTP-U Echo Request at ran (sb_ran checked Ethernet/IPv4, the UDP length and port 2152, and
// 16 <= ulen <= the IP payload) answered in place as sb_wire::answer_echo_request does (TS
// 29.281 sec. 7.2.2): MACs swapped, IPv4 from the request's destination to its source (TTL 64,
// no DF, identification 0), UDP from 2152 to the request's source port with the checksum
// computed, GTP-U flags 0x32 (the S flag), type 2, TEID 0, the request's sequence number (0
// without one), a Recovery IE with restart counter 0; 56 bytes, out of ran: redirected to ran
// itself, not XDP_TX (a veth's XDP_TX into a peer without an XDP program is not kicked: the
// answer sat in the peer's ring until other traffic came; a redirect's flush kicks it).
// Requests with extension headers or an N-PDU number go to the slow path, which answers them
// the same.
static __always_inline int echo(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    __u8 *h = data;
    if ((void *)(h + 14 + 20 + 8 + 8) > end)
        return slow(ctx, C_SLOW_PARSE);
    __u8 *u = h + 34, *g = h + 42;
    __u8 flags = g[0];
    if (flags != 0x30 && flags != 0x32)
        return slow(ctx, C_SLOW_PARSE);
    __u32 glen = (__u32)g[2] << 8 | g[3];
    __u32 ulen = (__u32)u[4] << 8 | u[5];
    if (8 + glen > ulen - 8)
        return slow(ctx, C_SLOW_PARSE);
    __u32 seq = 0;
    if (flags & 2) {
        if (glen < 4 || (void *)(g + 12) > end)
            return slow(ctx, C_SLOW_PARSE);
        seq = (__u32)g[8] << 8 | g[9];
    }
    __u8 smac[6], dmac[6], sip[4], dip[4], sport[2] = {u[0], u[1]};
    copy6(smac, h + 6);
    copy6(dmac, h);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        sip[i] = h[26 + i];
        dip[i] = h[30 + i];
    }
    __u32 len = (__u32)(end - data);
    if (len != 56 && bpf_xdp_adjust_tail(ctx, 56 - (int)len))
        return slow(ctx, C_SLOW_OTHER);
    data = (void *)(long)ctx->data;
    end = (void *)(long)ctx->data_end;
    h = data;
    if ((void *)(h + 56) > end)
        return XDP_ABORTED;
    copy6(h, smac);
    copy6(h + 6, dmac);
    h[12] = 0x08;
    h[13] = 0x00;
    __u8 *o = h + 14;
    o[0] = 0x45;
    o[1] = 0;
    o[2] = 0;
    o[3] = 42;
    o[4] = 0;
    o[5] = 0;
    o[6] = 0;
    o[7] = 0;
    o[8] = 64;
    o[9] = 17;
    o[10] = 0;
    o[11] = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        o[12 + i] = dip[i];
        o[16 + i] = sip[i];
    }
    __u16 c = ipv4_csum(o);
    o[10] = c >> 8;
    o[11] = c & 0xff;
    u = o + 20;
    u[0] = 2152 >> 8;
    u[1] = 2152 & 0xff;
    u[2] = sport[0];
    u[3] = sport[1];
    u[4] = 0;
    u[5] = 22;
    u[6] = 0;
    u[7] = 0;
    g = u + 8;
    g[0] = 0x32;
    g[1] = 2;
    g[2] = 0;
    g[3] = 6;
    g[4] = 0;
    g[5] = 0;
    g[6] = 0;
    g[7] = 0;
    g[8] = seq >> 8;
    g[9] = seq & 0xff;
    g[10] = 0;
    g[11] = 0;
    g[12] = 14;  // Recovery
    g[13] = 0;
    // The UDP checksum: the pseudo-header (addresses, protocol, length) and the segment.
    __u32 sum = 17 + 22;
#pragma unroll
    for (int i = 12; i < 20; i += 2)
        sum += (__u32)o[i] << 8 | o[i + 1];
#pragma unroll
    for (int i = 0; i < 22; i += 2)
        sum += (__u32)u[i] << 8 | u[i + 1];
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    __u16 uc = ~(__u16)sum;
    if (!uc)
        uc = 0xffff;
    u[6] = uc >> 8;
    u[7] = uc & 0xff;
    count(C_ECHO);
    return bpf_redirect(ctx->ingress_ifindex, 0);
}

SEC("xdp.frags")
int sb_ran(struct xdp_md *ctx)
{
    __u32 zero = 0;
    struct sb_cfg *cfg = bpf_map_lookup_elem(&sb_cfg, &zero);
    if (!cfg || !(cfg->flags & CFG_READY))
        return slow(ctx, C_SLOW_OTHER);
    count(C_RX_RAN);
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    __u8 *eth = data;
    if ((void *)(eth + 14) > end)
        return slow(ctx, C_SLOW_PARSE);
    if (eth[12] != 0x08 || eth[13] != 0x00)
        return slow(ctx, C_SLOW_NOT_IP);
    __u8 *ip = eth + 14;
    __u32 len = (__u32)(end - data), tot = 0;
    int r = ipv4_ok(ip, len - 14, end, &tot);
    if (r)
        return slow(ctx, r);
    if (ip[9] != 17)
        return slow(ctx, C_SLOW_PARSE);
    __u8 *u = ip + 20;
    if ((void *)(u + 8) > end || tot < 28)
        return slow(ctx, C_SLOW_PARSE);
    __u32 ulen = (__u32)u[4] << 8 | u[5];
    if (ulen < 8 || ulen > tot - 20)
        return slow(ctx, C_SLOW_PARSE);
    if (u[2] != (2152 >> 8) || u[3] != (2152 & 0xff))
        return slow(ctx, C_SLOW_PARSE);  // not GTP-U
    __u8 *g = u + 8;
    if ((void *)(g + 8) > end || ulen < 16)
        return slow(ctx, C_SLOW_PARSE);
    if (g[1] == 1)
        return echo(ctx);
    if (g[0] != 0x30 || g[1] != 0xff)
        return slow(ctx, C_SLOW_PARSE);  // options, extensions, echo, other messages
    __u32 glen = (__u32)g[2] << 8 | g[3];
    if (8 + glen > ulen - 8)
        return slow(ctx, C_SLOW_PARSE);
    __u8 *in = g + 8;
    if ((void *)(in + 1) > end)
        return slow(ctx, C_SLOW_PARSE);
    if ((in[0] >> 4) != 4)
        return slow(ctx, C_SLOW_PARSE);  // IPv6 inside: slow path
    __u32 itot = 0;
    r = ipv4_ok(in, glen, end, &itot);
    if (r)
        return slow(ctx, r);
    r = l4_ok(in, itot, end);
    if (r)
        return slow(ctx, r);
    __u8 teid[4] = {g[4], g[5], g[6], g[7]};
    __u8 *v = bpf_map_lookup_elem(&sb_uplink, teid);
    if (!v)
        return slow(ctx, C_SLOW_TEID_MISS);
    __u8 key[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, in[12], in[13], in[14], in[15]};
#pragma unroll
    for (int i = 0; i < 16; i++)
        if (v[i] != key[i])
            return slow(ctx, C_SLOW_UL_CHECK);
    if (v[21] || v[22] || v[23])
        return slow(ctx, C_SLOW_POLICY);
    if (in[8] <= 1)
        return slow(ctx, C_SLOW_TTL);
    ipv4_dec_ttl(in);
    // The frame becomes Ethernet + the inner packet: 36 bytes off the front, the rest of
    // the G-PDU (and any Ethernet padding) off the end.
    __u32 keep = 50 + itot;
    if (len > keep && bpf_xdp_adjust_tail(ctx, (int)keep - (int)len))
        return XDP_ABORTED;
    if (bpf_xdp_adjust_head(ctx, 36))
        return XDP_ABORTED;
    data = (void *)(long)ctx->data;
    end = (void *)(long)ctx->data_end;
    __u8 *h = data;
    if ((void *)(h + 14) > end)
        return XDP_ABORTED;
    copy6(h, cfg->inet_peer);
    copy6(h + 6, cfg->inet_mac);
    h[12] = 0x08;
    h[13] = 0x00;
    count(C_UP_TO_INET);
    return bpf_redirect(cfg->ifindex_inet, 0);
}

// ---- test programs (BPF_PROG_TEST_RUN only) ---------------------------------------------------

// The packet holds n 16-byte keys; each is replaced by its hash (lo, hi little endian).
#define TEST_KEYS 64
SEC("xdp")
int sb_test_hash(struct xdp_md *ctx)
{
    __u32 zero = 0;
    struct sb_cfg *cfg = bpf_map_lookup_elem(&sb_cfg, &zero);
    if (!cfg)
        return XDP_ABORTED;
    for (int i = 0; i < TEST_KEYS; i++) {
        void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
        __u8 *k = (__u8 *)data + i * 16;
        if ((void *)(k + 16) > end)
            break;
        __u64 lo, hi;
        hash16(k, cfg->seed, &lo, &hi);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            k[j] = lo >> (8 * j);
            k[8 + j] = hi >> (8 * j);
        }
    }
    return XDP_PASS;
}

// The packet holds 16-byte keys; the first two bytes of each become its GPT answer (little
// endian; 0xffff: no table, 0xfffe: retry).
SEC("xdp")
int sb_test_gpt(struct xdp_md *ctx)
{
    __u32 zero = 0;
    struct sb_cfg *cfg = bpf_map_lookup_elem(&sb_cfg, &zero);
    if (!cfg)
        return XDP_ABORTED;
    for (int i = 0; i < TEST_KEYS; i++) {
        void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
        __u8 *k = (__u8 *)data + i * 16;
        if ((void *)(k + 16) > end)
            break;
        __u64 lo, hi;
        hash16(k, cfg->seed, &lo, &hi);
        int v = gpt_lookup(cfg, lo, hi);
        __u16 o = v == GPT_RETRY ? 0xfffe : v < 0 ? 0xffff : (__u16)v;
        k[0] = o & 0xff;
        k[1] = o >> 8;
    }
    return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
