/* Standalone reproducer: does DPDK's EFD (rte_efd) answer wrong from its AVX2 lookup path?
 *
 * DPDK API only (no scalebricks shim). Starts the EAL without hugepages or PCI devices, creates
 * an EFD table, inserts N distinct 13-byte keys with random values, then looks every key up
 * with rte_efd_lookup (one key) and rte_efd_lookup_bulk (bursts of RTE_EFD_BURST_MAX) and
 * counts the answers that differ from the inserted value.
 *
 *   ./efd_avx2 [N] [EAL options...]
 *   ./efd_avx2 100000                                  # default SIMD width (AVX2 if the CPU has it)
 *   ./efd_avx2 100000 --force-max-simd-bitwidth=128    # the cap crates/peers starts the EAL with
 *
 * Exit status: 0 when every answer is right, 1 when some are wrong, 2 on a setup error.
 * Build: make (see Makefile), or
 *   cc -O2 -DALLOW_EXPERIMENTAL_API -o efd_avx2 efd_avx2.c $(pkg-config --cflags --libs libdpdk)
 */
#include <rte_cpuflags.h>
#include <rte_eal.h>
#include <rte_efd.h>
#include <rte_errno.h>
#include <rte_vect.h>
#include <rte_version.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_LEN 13

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int main(int argc, char **argv) {
    uint32_t n = 100000;
    int first_eal = 1;
    if (argc > 1 && argv[1][0] != '-') {
        n = (uint32_t)strtoul(argv[1], NULL, 10);
        first_eal = 2;
    }
    /* EAL arguments: the fixed ones, then whatever followed N on the command line. */
    char *eal[32];
    int ne = 0;
    eal[ne++] = "efd_avx2";
    eal[ne++] = "--no-huge";
    eal[ne++] = "--no-pci";
    eal[ne++] = "--no-shconf";
    eal[ne++] = "-m";
    eal[ne++] = "256";
    eal[ne++] = "-l";
    eal[ne++] = "0";
    eal[ne++] = "--log-level=lib.*:error";
    for (int i = first_eal; i < argc && ne < 31; i++) eal[ne++] = argv[i];
    eal[ne] = NULL;
    if (rte_eal_init(ne, eal) < 0) {
        fprintf(stderr, "rte_eal_init failed: %s\n", rte_strerror(rte_errno));
        return 2;
    }
    printf("%s, EFD value bits %d, burst %d\n", rte_version(), RTE_EFD_VALUE_NUM_BITS,
           RTE_EFD_BURST_MAX);
    printf("CPU AVX2: %s, max SIMD bitwidth: %u\n",
           rte_cpu_get_flag_enabled(RTE_CPUFLAG_AVX2) > 0 ? "yes" : "no",
           rte_vect_get_max_simd_bitwidth());

    struct rte_efd_table *t = rte_efd_create("repro", n, KEY_LEN, 1 /* socket 0 online */, 0);
    if (t == NULL) {
        fprintf(stderr, "rte_efd_create failed: %s\n", rte_strerror(rte_errno));
        return 2;
    }
    uint8_t *keys = malloc((size_t)n * KEY_LEN);
    efd_value_t *want = malloc((size_t)n * sizeof *want);
    if (keys == NULL || want == NULL) return 2;
    uint64_t s = 42;
    const efd_value_t mask = (efd_value_t)((1u << RTE_EFD_VALUE_NUM_BITS) - 1);
    uint32_t update_failed = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *k = keys + (size_t)i * KEY_LEN;
        /* Distinct keys: the first 4 bytes are the index, the rest random. */
        uint64_t r = splitmix64(&s);
        memcpy(k, &i, 4);
        memcpy(k + 4, &r, 8);
        k[12] = (uint8_t)(r >> 56);
        want[i] = (efd_value_t)(splitmix64(&s) & mask);
        int u = rte_efd_update(t, 0, k, want[i]);
        if (u == RTE_EFD_UPDATE_FAILED) update_failed++;
    }
    uint32_t wrong_single = 0, wrong_bulk = 0, wrong_zero = 0;
    for (uint32_t i = 0; i < n; i++)
        if (rte_efd_lookup(t, 0, keys + (size_t)i * KEY_LEN) != want[i]) wrong_single++;
    const void *ptrs[RTE_EFD_BURST_MAX];
    efd_value_t got[RTE_EFD_BURST_MAX];
    for (uint32_t i = 0; i < n; i += RTE_EFD_BURST_MAX) {
        int m = (int)(n - i < RTE_EFD_BURST_MAX ? n - i : RTE_EFD_BURST_MAX);
        for (int j = 0; j < m; j++) ptrs[j] = keys + (size_t)(i + j) * KEY_LEN;
        rte_efd_lookup_bulk(t, 0, m, ptrs, got);
        for (int j = 0; j < m; j++)
            if (got[j] != want[i + j]) {
                wrong_bulk++;
                if (got[j] == 0) wrong_zero++;
            }
    }
    printf("%u keys inserted (%u updates failed): wrong answers: rte_efd_lookup %u, "
           "rte_efd_lookup_bulk %u\n",
           n, update_failed, wrong_single, wrong_bulk);
    printf("wrong bulk answers that are 0: %u\n", wrong_zero);
    rte_efd_free(t);
    free(keys);
    free(want);
    rte_eal_cleanup();
    return (wrong_single || wrong_bulk) ? 1 : 0;
}
