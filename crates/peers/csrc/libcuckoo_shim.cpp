// libcuckoo's cuckoohash_map (Debian libcuckoo-dev) with fixed-size byte-array keys and values,
// behind a C interface for the benchmark. One instantiation per supported (key, value) size.
#include <libcuckoo/cuckoohash_map.hh>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>

namespace {

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
};

template <size_t K, size_t V> struct TableKV final : Table {
    using Map = libcuckoo::cuckoohash_map<Bytes<K>, Bytes<V>, BytesHash<K>>;
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
void *sb_lc_create(size_t key_len, size_t value_len, size_t n, int fixed) {
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
size_t sb_lc_find_many(const void *t, const uint8_t *keys, size_t n, size_t key_len,
                       size_t value_len, uint8_t *values, uint8_t *found) {
    const Table *tb = static_cast<const Table *>(t);
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        int h = tb->find(keys + i * key_len, values + i * value_len);
        found[i] = (uint8_t)h;
        hits += (size_t)h;
    }
    return hits;
}
size_t sb_lc_size(const void *t) { return static_cast<const Table *>(t)->size(); }
size_t sb_lc_capacity(const void *t) { return static_cast<const Table *>(t)->capacity(); }
size_t sb_lc_memory(const void *t) { return static_cast<const Table *>(t)->memory(); }
double sb_lc_load_factor(const void *t) { return static_cast<const Table *>(t)->load_factor(); }
}
