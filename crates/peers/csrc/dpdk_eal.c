/* Starts DPDK's EAL once per process, without hugepages or PCI devices, for the benchmarks. */
#define _GNU_SOURCE
#include <sched.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <stdio.h>
#include <string.h>

static int sb_eal_state = 0; /* 0: not started, 1: started, -1: failed */

/* Returns 0 on success (also when already started), a negative errno otherwise.
 * `mem_mb` is the memory DPDK may take from the (4 KB page) heap. */
int sb_dpdk_eal_init(unsigned mem_mb) {
    if (sb_eal_state == 1) return 0;
    if (sb_eal_state == -1) return -1;
    char mem[32];
    snprintf(mem, sizeof mem, "%u", mem_mb);
    /* The AVX2 lookup path of Debian's DPDK 22.11 EFD answers wrong on these machines; with
     * 128-bit SIMD it is correct. rte_hash is unaffected by the cap. */
    char *argv[] = {"scalebricks", "--no-huge", "--no-pci", "--no-shconf",
                    "--log-level=lib.*:error", "--force-max-simd-bitwidth=128",
                    "-l", "0", "-m", mem, NULL};
    int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
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
