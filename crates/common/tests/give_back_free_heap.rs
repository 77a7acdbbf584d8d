//! `give_back_free_heap` returns freed heap memory that the allocator kept (its own process:
//! no other test allocates meanwhile).
#![cfg(all(target_os = "linux", target_env = "gnu"))]

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .expect("rss")
        .parse()
        .expect("a number");
    pages * 4096
}

#[test]
fn freed_small_blocks_go_back_to_the_system() {
    // 256 MiB in 1 KiB blocks (heap blocks, not mappings of their own), every page touched;
    // then all freed but one block in 1024 of them: the heap cannot shrink from its top, and
    // nearly every page of it is free.
    let blocks: Vec<Vec<u8>> = (0..256 * 1024).map(|i| vec![i as u8 | 1; 1024]).collect();
    let kept: Vec<Vec<u8>> = blocks
        .into_iter()
        .enumerate()
        .filter_map(|(i, b)| (i % 1024 == 0).then_some(b))
        .collect();
    let before = rss_bytes();
    sb_common::huge::give_back_free_heap();
    let after = rss_bytes();
    assert!(
        before.saturating_sub(after) > 128 << 20,
        "RSS {before} -> {after}: under 128 MiB given back"
    );
    assert!(kept.iter().all(|b| b[0] & 1 == 1));
}
