/* A thin shim over DPDK's EFD library (rte_efd) for the GPT benchmark: one online table on
 * socket 0, the offline (update) side on socket 0 too. The EAL must be started first
 * (sb_dpdk_eal_init). */
#include <rte_efd.h>
#include <rte_errno.h>
#include <stdint.h>
#include <stdio.h>

/* Bits of the value EFD stores (RTE_EFD_VALUE_NUM_BITS of the installed build). */
unsigned sb_efd_value_bits(void) { return RTE_EFD_VALUE_NUM_BITS; }

/* Longest burst rte_efd_lookup_bulk takes. */
unsigned sb_efd_burst_max(void) { return RTE_EFD_BURST_MAX; }

/* Creates a table for at least `max_rules` keys of `key_len` bytes. NULL on failure, with
 * *err = rte_errno. */
struct rte_efd_table *sb_efd_create(const char *name, uint32_t max_rules, uint32_t key_len,
                                    int *err) {
    struct rte_efd_table *t = rte_efd_create(name, max_rules, key_len, 1 /* socket 0 online */,
                                             0 /* offline on socket 0 */);
    if (t == NULL && err != NULL) *err = rte_errno;
    return t;
}

void sb_efd_free(struct rte_efd_table *t) { rte_efd_free(t); }

/* Inserts or changes `key` -> `value`. Returns rte_efd_update's result: 0 ok,
 * RTE_EFD_UPDATE_WARN_GROUP_FULL (1, still ok), RTE_EFD_UPDATE_NO_CHANGE (2, ok),
 * RTE_EFD_UPDATE_FAILED (3: the table is in an indeterminate state). */
int sb_efd_update(struct rte_efd_table *t, const void *key, uint32_t value) {
    return rte_efd_update(t, 0, key, (efd_value_t)value);
}

/* Removes `key`; 0 when it was there. */
int sb_efd_delete(struct rte_efd_table *t, const void *key) {
    return rte_efd_delete(t, 0, key, NULL);
}

uint32_t sb_efd_lookup(const struct rte_efd_table *t, const void *key) {
    return rte_efd_lookup(t, 0, key);
}

/* Looks up `n` keys (any n), in bursts of at most RTE_EFD_BURST_MAX. */
void sb_efd_lookup_bulk(const struct rte_efd_table *t, const void **keys, uint32_t n,
                        uint16_t *out) {
    efd_value_t vals[RTE_EFD_BURST_MAX];
    for (uint32_t i = 0; i < n; i += RTE_EFD_BURST_MAX) {
        uint32_t m = n - i < RTE_EFD_BURST_MAX ? n - i : RTE_EFD_BURST_MAX;
        rte_efd_lookup_bulk(t, 0, (int)m, keys + i, vals);
        for (uint32_t j = 0; j < m; j++) out[i + j] = (uint16_t)vals[j];
    }
}
