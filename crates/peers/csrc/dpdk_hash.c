/* DPDK rte_hash as the benchmark runs it: lock-free reader/writer mode
 * (RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF), values of any size in a pool of fixed-size slots
 * whose pointer is the key's data, key slots (and their value slots) recycled through DPDK's
 * own RCU QSBR defer queue so a reader never reads a value slot after it was reused. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rte_hash.h>
#include <rte_malloc.h>
#include <rte_rcu_qsbr.h>

#define SB_MAX_READERS 8

struct sb_rte_hash {
    struct rte_hash *h;
    struct rte_rcu_qsbr *qsbr;
    uint32_t key_len, value_len, n_values;
    uint8_t *values;   /* n_values * value_len bytes, from DPDK's heap (its pages) */
    uint32_t *free;    /* stack of free value slots (writer only), from DPDK's heap */
    uint32_t n_free;
    size_t dpdk_bytes; /* bytes DPDK's heap handed out for all of the above */
};

static size_t heap_bytes(void) {
    size_t total = 0;
    for (int s = 0; s < RTE_MAX_NUMA_NODES; s++) {
        struct rte_malloc_socket_stats st;
        if (rte_malloc_get_socket_stats(s, &st) == 0) total += st.heap_allocsz_bytes;
    }
    return total;
}

/* Called by rte_hash (on the writer's thread) once no reader can still see a deleted key. */
static void free_value(void *p, void *key_data) {
    struct sb_rte_hash *t = p;
    uint32_t slot = (uint32_t)(((uint8_t *)key_data - t->values) / t->value_len);
    t->free[t->n_free++] = slot;
}

struct sb_rte_hash *sb_rte_hash_create(uint32_t entries, uint32_t key_len, uint32_t value_len) {
    static unsigned counter = 0;
    char name[RTE_HASH_NAMESIZE];
    snprintf(name, sizeof name, "sbh%u", counter++);
    struct sb_rte_hash *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    size_t before = heap_bytes();
    struct rte_hash_parameters p = {
        .name = name,
        .entries = entries,
        .key_len = key_len,
        .hash_func = NULL, /* DPDK's default (CRC32 when available, else jhash) */
        .hash_func_init_val = 0,
        .socket_id = 0,
        .extra_flag = RTE_HASH_EXTRA_FLAGS_RW_CONCURRENCY_LF,
    };
    t->h = rte_hash_create(&p);
    if (!t->h) goto fail;
    size_t qsz = rte_rcu_qsbr_get_memsize(SB_MAX_READERS);
    t->qsbr = rte_zmalloc("sb_qsbr", qsz, RTE_CACHE_LINE_SIZE);
    if (!t->qsbr || rte_rcu_qsbr_init(t->qsbr, SB_MAX_READERS) != 0) goto fail;
    struct rte_hash_rcu_config rc = {
        .v = t->qsbr,
        .mode = RTE_HASH_QSBR_MODE_DQ,
        .key_data_ptr = t,
        .free_key_data_func = free_value,
    };
    if (rte_hash_rcu_qsbr_add(t->h, &rc) != 0) goto fail;
    t->key_len = key_len;
    t->value_len = value_len;
    /* One value slot per key slot rte_hash can hand out (entries + its spare). The values sit in
     * DPDK's heap like the table, on the pages the EAL was given (hugepages when it has them). */
    t->n_values = entries + 64;
    t->values = rte_malloc("sb_values", (size_t)t->n_values * value_len, RTE_CACHE_LINE_SIZE);
    t->free = rte_malloc("sb_free", (size_t)t->n_values * sizeof(uint32_t), 0);
    if (!t->values || !t->free) goto fail;
    t->dpdk_bytes = heap_bytes() - before;
    for (uint32_t i = 0; i < t->n_values; i++) t->free[i] = t->n_values - 1 - i;
    t->n_free = t->n_values;
    return t;
fail:
    if (t->h) rte_hash_free(t->h);
    rte_free(t->qsbr);
    rte_free(t->values);
    rte_free(t->free);
    free(t);
    return NULL;
}

void sb_rte_hash_free(struct sb_rte_hash *t) {
    if (!t) return;
    rte_hash_free(t->h);
    rte_free(t->qsbr);
    rte_free(t->values);
    rte_free(t->free);
    free(t);
}

/* Bytes DPDK's heap handed out for the table, its RCU state, the value pool and its free list. */
size_t sb_rte_hash_memory(const struct sb_rte_hash *t) { return t->dpdk_bytes; }

/* Writer: inserts a new key. 0 on success, 1 if the key was present (value replaced in place:
 * only safe without concurrent readers), -ENOSPC when full. */
int sb_rte_hash_insert(struct sb_rte_hash *t, const void *key, const void *value) {
    void *old;
    if (rte_hash_lookup_data(t->h, key, &old) >= 0) {
        memcpy(old, value, t->value_len);
        return 1;
    }
    if (t->n_free == 0) return -ENOSPC;
    uint32_t slot = t->free[--t->n_free];
    uint8_t *v = t->values + (size_t)slot * t->value_len;
    memcpy(v, value, t->value_len);
    int r = rte_hash_add_key_data(t->h, key, v); /* publishes v with release order */
    if (r < 0) {
        t->free[t->n_free++] = slot;
        return r;
    }
    return 0;
}

/* Writer: 0 when deleted, -ENOENT when absent. The value slot comes back through the RCU. */
int sb_rte_hash_delete(struct sb_rte_hash *t, const void *key) {
    int32_t r = rte_hash_del_key(t->h, key);
    return r < 0 ? r : 0;
}

/* 1 and the value copied out on a hit, 0 on a miss. */
int sb_rte_hash_lookup(const struct sb_rte_hash *t, const void *key, void *out) {
    void *v;
    if (rte_hash_lookup_data(t->h, key, &v) < 0) return 0;
    memcpy(out, v, t->value_len);
    return 1;
}

/* `n` keys back to back; rte_hash_lookup_bulk_data on chunks of up to 64. Returns the hits. */
uint32_t sb_rte_hash_lookup_bulk(const struct sb_rte_hash *t, const uint8_t *keys, uint32_t n,
                                 uint8_t *values, uint8_t *found) {
    const void *kp[RTE_HASH_LOOKUP_BULK_MAX];
    void *data[RTE_HASH_LOOKUP_BULK_MAX];
    uint32_t hits = 0;
    for (uint32_t start = 0; start < n; start += RTE_HASH_LOOKUP_BULK_MAX) {
        uint32_t m = n - start < RTE_HASH_LOOKUP_BULK_MAX ? n - start : RTE_HASH_LOOKUP_BULK_MAX;
        for (uint32_t i = 0; i < m; i++) kp[i] = keys + (size_t)(start + i) * t->key_len;
        uint64_t mask = 0;
        rte_hash_lookup_bulk_data(t->h, kp, m, &mask, data);
        for (uint32_t i = 0; i < m; i++) {
            int hit = (mask >> i) & 1;
            found[start + i] = (uint8_t)hit;
            if (hit) {
                memcpy(values + (size_t)(start + i) * t->value_len, data[i], t->value_len);
                hits++;
            }
        }
    }
    return hits;
}

int32_t sb_rte_hash_count(const struct sb_rte_hash *t) { return rte_hash_count(t->h); }

/* Readers in concurrent use: register once (id < 8), report a quiescent state between batches
 * (no value pointer held), unregister when done. */
int sb_rte_hash_reader_register(struct sb_rte_hash *t, unsigned id) {
    if (id >= SB_MAX_READERS) return -EINVAL;
    int r = rte_rcu_qsbr_thread_register(t->qsbr, id);
    if (r == 0) rte_rcu_qsbr_thread_online(t->qsbr, id);
    return r;
}

void sb_rte_hash_reader_quiescent(struct sb_rte_hash *t, unsigned id) {
    rte_rcu_qsbr_quiescent(t->qsbr, id);
}

void sb_rte_hash_reader_unregister(struct sb_rte_hash *t, unsigned id) {
    rte_rcu_qsbr_thread_offline(t->qsbr, id);
    rte_rcu_qsbr_thread_unregister(t->qsbr, id);
}
