/* Starts DPDK's EAL once per process for the benchmarks, without PCI devices: on 2 MB hugepages
 * from a given hugetlbfs mount, or without hugepages (--no-huge, 4 KB pages); and reports the
 * memory segments DPDK's heap sits on. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_memory.h>

static int sb_eal_state = 0; /* 0: not started, 1: started, -1: failed */

/* Returns 0 on success (also when already started), a negative errno otherwise.
 * `mem_mb` is the memory DPDK takes at start; `huge_dir` a hugetlbfs mount of 2 MB pages to take
 * it from, or NULL for --no-huge (anonymous 4 KB-page memory). */
int sb_dpdk_eal_init(unsigned mem_mb, const char *huge_dir) {
    if (sb_eal_state == 1) return 0;
    if (sb_eal_state == -1) return -1;
    char mem[32], prefix[64];
    snprintf(mem, sizeof mem, "%u", mem_mb);
    /* Our own file prefix: hugepage files of concurrent processes never collide. */
    snprintf(prefix, sizeof prefix, "sb%d", (int)getpid());
    /* The AVX2 lookup path of Debian's DPDK 22.11 EFD answers wrong on these machines; with
     * 128-bit SIMD it is correct. rte_hash is unaffected by the cap. */
    char *argv[24];
    int argc = 0;
    argv[argc++] = "scalebricks";
    if (huge_dir) {
        /* Files in the mount are unlinked once mapped: nothing is left behind. */
        argv[argc++] = "--huge-dir";
        argv[argc++] = (char *)huge_dir;
        argv[argc++] = "--huge-unlink";
        argv[argc++] = "--file-prefix";
        argv[argc++] = prefix;
    } else {
        argv[argc++] = "--no-huge";
    }
    argv[argc++] = "--no-pci";
    argv[argc++] = "--no-shconf";
    argv[argc++] = "--log-level=lib.*:error";
    argv[argc++] = "--force-max-simd-bitwidth=128";
    argv[argc++] = "-l";
    argv[argc++] = "0";
    argv[argc++] = "-m";
    argv[argc++] = mem;
    argv[argc] = NULL;
    /* rte_eal_init pins the calling thread to lcore 0; the benchmarks run their own threads
     * (rayon, readers, writers), so the caller gets its old CPU set back afterwards. */
    cpu_set_t before;
    int have_mask = sched_getaffinity(0, sizeof before, &before) == 0;
    int r = rte_eal_init(argc, argv);
    if (have_mask) sched_setaffinity(0, sizeof before, &before);
    if (r < 0) {
        sb_eal_state = -1;
        return -rte_errno;
    }
    sb_eal_state = 1;
    return 0;
}

struct seg_out {
    uintptr_t *addr;
    size_t *len;
    uint64_t *page_sz;
    size_t max, n;
};

static int seg_cb(const struct rte_memseg_list *msl, const struct rte_memseg *ms, size_t len,
                  void *arg) {
    struct seg_out *o = arg;
    if (msl->external) return 0;
    if (o->n < o->max) {
        o->addr[o->n] = (uintptr_t)ms->addr;
        o->len[o->n] = len;
        o->page_sz[o->n] = msl->page_sz;
    }
    o->n++;
    return 0;
}

/* DPDK's own report of its memory: the virtually contiguous runs of allocated segments (start,
 * length, the page size DPDK says backs them). Writes at most `max`, returns how many there are
 * (0 before the EAL started). */
size_t sb_dpdk_memsegs(uintptr_t *addr, size_t *len, uint64_t *page_sz, size_t max) {
    if (sb_eal_state != 1) return 0;
    struct seg_out o = {addr, len, page_sz, max, 0};
    rte_memseg_contig_walk(seg_cb, &o);
    return o.n;
}
