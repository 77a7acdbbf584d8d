// SPDX-License-Identifier: Apache-2.0 OR MIT
//
// Traffic generator and sink for `scalebricks-bench io --backend xdp-fast` (crate sb-xdp,
// module `bench`; built with clang -target bpf by build.rs under the cargo feature `bpf`).
//
// sb_gen runs through BPF_PROG_TEST_RUN in live-frames mode (BPF_F_TEST_XDP_LIVE_FRAMES, as
// xdp-trafficgen does): each run writes the next template frame over the packet (the kernel
// recycles the pages of earlier runs as the receiver left them, so every byte is written
// again) and redirects it out of the generator's veth. sb_sink, attached to the far veth,
// counts what arrives and drops it.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define GEN_FRAME_MAX 128

struct gen_frame {
    __u8 b[GEN_FRAME_MAX];
};

struct gen_cfg {
    __u32 n_frames;  // templates in sb_gen_frames
    __u32 ifindex;   // where sb_gen redirects
};

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);  // sized by the loader
    __type(key, __u32);
    __type(value, struct gen_frame);
} sb_gen_frames SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct gen_cfg);
} sb_gen_cfg SEC(".maps");

// Per CPU: [0] the generator's next template, [1] frames the sink saw, [2] their bytes.
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 3);
    __type(key, __u32);
    __type(value, __u64);
} sb_bench_stats SEC(".maps");

SEC("xdp")
int sb_gen(struct xdp_md *ctx)
{
    __u32 zero = 0;
    struct gen_cfg *cfg = bpf_map_lookup_elem(&sb_gen_cfg, &zero);
    __u64 *next = bpf_map_lookup_elem(&sb_bench_stats, &zero);
    if (!cfg || !next || cfg->n_frames == 0)
        return XDP_ABORTED;
    __u32 i = (__u32)(*next % cfg->n_frames);
    *next += 1;
    struct gen_frame *f = bpf_map_lookup_elem(&sb_gen_frames, &i);
    if (!f)
        return XDP_ABORTED;
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    __u32 *d = data;
    __u32 *s = (__u32 *)f->b;
#pragma unroll
    for (int w = 0; w < GEN_FRAME_MAX / 4; w++) {
        if ((void *)(d + w + 1) > end)
            break;
        d[w] = s[w];
    }
    return bpf_redirect(cfg->ifindex, 0);
}

SEC("xdp")
int sb_sink(struct xdp_md *ctx)
{
    __u32 k = 1;
    __u64 *n = bpf_map_lookup_elem(&sb_bench_stats, &k);
    if (n)
        *n += 1;
    k = 2;
    __u64 *b = bpf_map_lookup_elem(&sb_bench_stats, &k);
    if (b)
        *b += ctx->data_end - ctx->data;
    return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
