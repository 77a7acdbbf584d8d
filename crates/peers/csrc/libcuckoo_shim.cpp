// libcuckoo's cuckoohash_map (Debian libcuckoo-dev) with fixed-size byte-array keys and values,
// behind a C interface for the benchmark. One instantiation per supported (key, value) size; the
// hasher is std::hash of the key bytes (libstdc++'s murmur-style _Hash_bytes); large arrays sit on
// 2 MB pages (HugeAlloc) unless asked otherwise.
#include <libcuckoo/cuckoohash_map.hh>

#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string_view>
#include <vector>

namespace {

constexpr size_t HUGE_PAGE = size_t(2) << 20;

// Advice for the next large allocations: MADV_HUGEPAGE (true) or MADV_NOHUGEPAGE (false).
std::atomic<bool> g_huge{true};

// Live allocations of 2 MB and more (the bucket arrays), so their pages can be measured.
std::mutex g_ranges_mu;
std::vector<std::pair<uintptr_t, size_t>> g_ranges;

// Allocations of 2 MB and more get their own 2 MB-aligned anonymous mapping, advised for
// transparent huge pages (or kept off them), as sb_common::HugeArray does for our tables; smaller
// ones come from operator new.
template <class T> struct HugeAlloc {
    using value_type = T;
    HugeAlloc() noexcept {}
    template <class U> HugeAlloc(const HugeAlloc<U> &) noexcept {}
    static size_t map_len(size_t n) { return (n * sizeof(T) + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE; }
    T *allocate(size_t n) {
        if (n * sizeof(T) < HUGE_PAGE) return std::allocator<T>().allocate(n);
        size_t len = map_len(n);
        void *raw = mmap(nullptr, len + HUGE_PAGE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) throw std::bad_alloc();
        uintptr_t r = reinterpret_cast<uintptr_t>(raw);
        uintptr_t start = (r + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
        if (start > r) munmap(raw, start - r);
        size_t tail = HUGE_PAGE - (start - r);
        if (tail > 0) munmap(reinterpret_cast<void *>(start + len), tail);
        madvise(reinterpret_cast<void *>(start), len,
                g_huge.load(std::memory_order_relaxed) ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        {
            std::lock_guard<std::mutex> g(g_ranges_mu);
            g_ranges.emplace_back(start, len);
        }
        return reinterpret_cast<T *>(start);
    }
    void deallocate(T *p, size_t n) noexcept {
        if (n * sizeof(T) < HUGE_PAGE) return std::allocator<T>().deallocate(p, n);
        uintptr_t a = reinterpret_cast<uintptr_t>(p);
        {
            std::lock_guard<std::mutex> g(g_ranges_mu);
            for (size_t i = 0; i < g_ranges.size(); i++) {
                if (g_ranges[i].first == a) {
                    g_ranges.erase(g_ranges.begin() + i);
                    break;
                }
            }
        }
        munmap(p, map_len(n));
    }
    template <class U> bool operator==(const HugeAlloc<U> &) const noexcept { return true; }
    template <class U> bool operator!=(const HugeAlloc<U> &) const noexcept { return false; }
};

template <size_t N> struct Bytes {
    std::array<uint8_t, N> b;
    bool operator==(const Bytes &o) const { return std::memcmp(b.data(), o.b.data(), N) == 0; }
};

template <size_t N> struct BytesHash {
    size_t operator()(const Bytes<N> &k) const {
        return std::hash<std::string_view>()(
            std::string_view(reinterpret_cast<const char *>(k.b.data()), N));
    }
};

struct Table {
    virtual ~Table() {}
    virtual int insert(const uint8_t *k, const uint8_t *v) = 0;
    virtual int erase(const uint8_t *k) = 0;
    virtual int find(const uint8_t *k, uint8_t *out) const = 0;
    virtual size_t size() const = 0;
    virtual size_t capacity() const = 0;
    virtual size_t memory() const = 0;
    virtual double load_factor() const = 0;
    virtual size_t find_many(const uint8_t *keys, size_t n, uint8_t *values,
                             uint8_t *found) const = 0;
};

template <size_t K, size_t V> struct TableKV final : Table {
    using Map = libcuckoo::cuckoohash_map<Bytes<K>, Bytes<V>, BytesHash<K>,
                                          std::equal_to<Bytes<K>>,
                                          HugeAlloc<std::pair<const Bytes<K>, Bytes<V>>>>;
    Map m;
    explicit TableKV(size_t n, bool fixed) : m(n) {
        if (fixed) {
            m.minimum_load_factor(0.0);
            m.maximum_hashpower(m.hashpower());
        }
    }
    // 1: new key, 0: value replaced, -1: no room within the fixed size.
    int insert(const uint8_t *k, const uint8_t *v) override {
        Bytes<K> key;
        Bytes<V> val;
        std::memcpy(key.b.data(), k, K);
        std::memcpy(val.b.data(), v, V);
        try {
            return m.insert_or_assign(key, val) ? 1 : 0;
        } catch (const libcuckoo::maximum_hashpower_exceeded &) {
            return -1;
        } catch (const libcuckoo::load_factor_too_low &) {
            return -1;
        }
    }
    int erase(const uint8_t *k) override {
        Bytes<K> key;
        std::memcpy(key.b.data(), k, K);
        return m.erase(key) ? 1 : 0;
    }
    int find(const uint8_t *k, uint8_t *out) const override {
        Bytes<K> key;
        std::memcpy(key.b.data(), k, K);
        return m.find_fn(key, [&](const Bytes<V> &v) { std::memcpy(out, v.b.data(), V); }) ? 1 : 0;
    }
    // The batch loop inside the template: one call per batch, the map's own hasher and find_fn
    // inlined for this key and value size (no virtual call per key).
    size_t find_many(const uint8_t *keys, size_t n, uint8_t *values,
                     uint8_t *found) const override {
        size_t hits = 0;
        for (size_t i = 0; i < n; i++) {
            Bytes<K> key;
            std::memcpy(key.b.data(), keys + i * K, K);
            uint8_t *out = values + i * V;
            bool h = m.find_fn(key, [&](const Bytes<V> &v) { std::memcpy(out, v.b.data(), V); });
            found[i] = (uint8_t)h;
            hits += (size_t)h;
        }
        return hits;
    }
    size_t size() const override { return m.size(); }
    size_t capacity() const override { return m.capacity(); }
    // Slots (pair + partial byte + occupied flag) plus the lock array (64-byte spinlocks, at most
    // 65536 of them): an estimate from libcuckoo's layout, which it does not report.
    size_t memory() const override {
        size_t locks = m.bucket_count() < 65536 ? m.bucket_count() : 65536;
        return m.capacity() * (sizeof(std::pair<const Bytes<K>, Bytes<V>>) + 2) + locks * 64;
    }
    double load_factor() const override { return m.load_factor(); }
};

template <size_t K> Table *make_v(size_t v, size_t n, bool fixed) {
    switch (v) {
    case 8: return new TableKV<K, 8>(n, fixed);
    case 16: return new TableKV<K, 16>(n, fixed);
    case 64: return new TableKV<K, 64>(n, fixed);
    default: return nullptr;
    }
}

} // namespace

extern "C" {

// NULL when the (key, value) size pair has no instantiation: keys 4/13/16/40, values 8/16/64.
// `huge`: the advice for this table's large allocations (and later ones until changed).
void *sb_lc_create(size_t key_len, size_t value_len, size_t n, int fixed, int huge) {
    g_huge.store(huge != 0, std::memory_order_relaxed);
    try {
        switch (key_len) {
        case 4: return make_v<4>(value_len, n, fixed != 0);
        case 13: return make_v<13>(value_len, n, fixed != 0);
        case 16: return make_v<16>(value_len, n, fixed != 0);
        case 40: return make_v<40>(value_len, n, fixed != 0);
        default: return nullptr;
        }
    } catch (...) {
        return nullptr;
    }
}
void sb_lc_free(void *t) { delete static_cast<Table *>(t); }
int sb_lc_insert(void *t, const uint8_t *k, const uint8_t *v) {
    return static_cast<Table *>(t)->insert(k, v);
}
int sb_lc_erase(void *t, const uint8_t *k) { return static_cast<Table *>(t)->erase(k); }
int sb_lc_find(const void *t, const uint8_t *k, uint8_t *out) {
    return static_cast<const Table *>(t)->find(k, out);
}
size_t sb_lc_find_many(const void *t, const uint8_t *keys, size_t n, uint8_t *values,
                       uint8_t *found) {
    return static_cast<const Table *>(t)->find_many(keys, n, values, found);
}
// The live allocations of 2 MB and more of every table: writes at most `max`, returns how many.
size_t sb_lc_large_ranges(uintptr_t *addr, size_t *len, size_t max) {
    std::lock_guard<std::mutex> g(g_ranges_mu);
    for (size_t i = 0; i < g_ranges.size() && i < max; i++) {
        addr[i] = g_ranges[i].first;
        len[i] = g_ranges[i].second;
    }
    return g_ranges.size();
}
size_t sb_lc_size(const void *t) { return static_cast<const Table *>(t)->size(); }
size_t sb_lc_capacity(const void *t) { return static_cast<const Table *>(t)->capacity(); }
size_t sb_lc_memory(const void *t) { return static_cast<const Table *>(t)->memory(); }
double sb_lc_load_factor(const void *t) { return static_cast<const Table *>(t)->load_factor(); }
}
