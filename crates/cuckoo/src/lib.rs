//! The partial FIB: a concurrent cuckoo hash table with a separate value array (one writer, lock-free readers).
