//! What pages back a structure, measured from `/proc/self/smaps`: the benchmarks' `page_size`.
//!
//! A row's page size is never written by hand: it is read from the kernel's per-mapping report
//! for the mappings that hold the structure. For each mapping the kernel gives its page size
//! (`KernelPageSize`: 4 kB, or 2048 kB for a hugetlbfs mapping such as DPDK's memory), its
//! resident bytes (`Rss`; for hugetlbfs mappings `Private_Hugetlb` + `Shared_Hugetlb`, as `Rss`
//! leaves them out) and the part on transparent huge pages (`AnonHugePages`, `ShmemPmdMapped`,
//! `FilePmdMapped`). [`parse_smaps`] adds these up over the parts of the mappings that overlap
//! given address ranges (a mapping that overlaps a range only partly counts in proportion), and
//! [`SmapsPages::page_info`] turns the sums into a [`PageInfo`] with a short label (`2M`, `4K`,
//! `mixed (NN% 2M)`).
//!
//! Where a structure's addresses are known, measure those ranges ([`measure_ranges`]); where
//! only some element's address is known (a C++ map, a Rust `HashMap`), measure the whole
//! mappings that hold those addresses ([`measure_mappings_holding`]); where none is known (a
//! crate that keeps its arrays private), measure the mappings that appeared while it was built
//! ([`MapSnapshot`]).
//!
//! ```
//! use sb_common::pages::parse_smaps;
//! let smaps = "\
//! 7f0000000000-7f0000400000 rw-p 00000000 00:00 0
//! Size:               4096 kB
//! KernelPageSize:        4 kB
//! Rss:                4096 kB
//! AnonHugePages:      4096 kB
//! ";
//! let p = parse_smaps(smaps, &[(0x7f00_0000_0000, 4 << 20)]);
//! assert_eq!(p.thp, 4 << 20);
//! assert_eq!(p.page_info().label(), "2M");
//! ```

use std::fmt;

/// What backs a structure: how many of its bytes sit on 2 MB pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PageInfo {
    /// Bytes of the structure (for measured mappings: their resident bytes).
    pub bytes: usize,
    /// Whether the structure's arrays were advised for transparent huge pages.
    pub thp_advised: bool,
    /// Bytes the kernel backs with 2 MB pages right now (transparent or hugetlbfs).
    pub huge_bytes: usize,
    /// The part of `huge_bytes` on hugetlbfs pages (reserved hugepages, as DPDK uses them).
    pub hugetlb_bytes: usize,
}

impl PageInfo {
    /// Combines the page information of several arrays of one structure.
    pub fn merge(self, other: PageInfo) -> PageInfo {
        PageInfo {
            bytes: self.bytes + other.bytes,
            thp_advised: self.thp_advised || other.thp_advised,
            huge_bytes: self.huge_bytes + other.huge_bytes,
            hugetlb_bytes: self.hugetlb_bytes + other.hugetlb_bytes,
        }
    }

    /// A short label for benchmark output: `"2M"` when at least 90% of the bytes sit on 2 MB
    /// pages, `"4K"` when none do, otherwise `"mixed (NN% 2M)"`.
    pub fn label(&self) -> String {
        if self.bytes == 0 || self.huge_bytes == 0 {
            "4K".to_string()
        } else if self.huge_bytes * 10 >= self.bytes * 9 {
            "2M".to_string()
        } else {
            format!("mixed ({}% 2M)", self.huge_bytes * 100 / self.bytes)
        }
    }

    /// A longer account: the bytes and their shares on hugetlbfs 2 MB pages, transparent 2 MB
    /// pages and small pages, e.g. `"512.0 MiB: 100.0% hugetlbfs 2M, 0.0% THP 2M, 0.0% 4K"`.
    pub fn detail(&self) -> String {
        let pct = |x: usize| {
            if self.bytes == 0 {
                0.0
            } else {
                x as f64 * 100.0 / self.bytes as f64
            }
        };
        let thp = self.huge_bytes.saturating_sub(self.hugetlb_bytes);
        let small = self.bytes.saturating_sub(self.huge_bytes);
        format!(
            "{:.1} MiB: {:.1}% hugetlbfs 2M, {:.1}% THP 2M, {:.1}% 4K",
            self.bytes as f64 / (1 << 20) as f64,
            pct(self.hugetlb_bytes),
            pct(thp),
            pct(small)
        )
    }
}

impl fmt::Display for PageInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// Sums over the parts of mappings that overlap some address ranges, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SmapsPages {
    /// Resident bytes (`Rss`, or the hugetlb counters for hugetlbfs mappings).
    pub resident: usize,
    /// Resident bytes on transparent huge pages.
    pub thp: usize,
    /// Resident bytes of hugetlbfs mappings with 2 MB pages.
    pub hugetlb_2m: usize,
    /// Resident bytes of hugetlbfs mappings with pages of another size (1 GB); not counted as
    /// 2 MB by [`SmapsPages::page_info`].
    pub hugetlb_other: usize,
    /// Mappings that overlapped the ranges.
    pub mappings: usize,
}

impl SmapsPages {
    /// As a [`PageInfo`] whose `bytes` are the resident bytes.
    pub fn page_info(&self) -> PageInfo {
        PageInfo {
            bytes: self.resident,
            thp_advised: false,
            huge_bytes: (self.thp + self.hugetlb_2m).min(self.resident),
            hugetlb_bytes: self.hugetlb_2m.min(self.resident),
        }
    }
}

/// One mapping of an smaps text: its address range and the counters we use (bytes).
#[derive(Clone, Copy, Debug, Default)]
struct Mapping {
    start: usize,
    end: usize,
    kernel_page: usize,
    rss: usize,
    thp: usize,
    hugetlb: usize,
}

/// A mapping's header line: `start-end perms offset dev inode [path]`, addresses in hex.
fn header(line: &str) -> Option<(usize, usize)> {
    let (range, rest) = line.split_once(' ')?;
    // Counter lines look like `Rss:  8 kB`; a header's second field is the permissions.
    if range.ends_with(':') || rest.trim_start().len() < 4 {
        return None;
    }
    let (a, b) = range.split_once('-')?;
    let a = usize::from_str_radix(a, 16).ok()?;
    let b = usize::from_str_radix(b, 16).ok()?;
    (a < b).then_some((a, b))
}

/// A counter line `Name:   123 kB`, in bytes.
fn counter(line: &str) -> Option<(&str, usize)> {
    let (name, rest) = line.split_once(':')?;
    let kb: usize = rest.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some((name, kb.checked_mul(1024)?))
}

/// The mappings of an smaps text, in order. Lines that are neither a header nor a counter we
/// use are skipped, so malformed text yields fewer or emptier mappings, never a panic.
fn mappings(text: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in text.lines() {
        if let Some((start, end)) = header(line) {
            out.push(Mapping {
                start,
                end,
                kernel_page: 4096,
                ..Mapping::default()
            });
            continue;
        }
        let (Some(m), Some((name, bytes))) = (out.last_mut(), counter(line)) else {
            continue;
        };
        match name {
            "KernelPageSize" => m.kernel_page = bytes,
            "Rss" => m.rss = bytes,
            "AnonHugePages" | "ShmemPmdMapped" | "FilePmdMapped" => {
                m.thp = m.thp.saturating_add(bytes)
            }
            "Private_Hugetlb" | "Shared_Hugetlb" => m.hugetlb = m.hugetlb.saturating_add(bytes),
            _ => {}
        }
    }
    out
}

/// Adds up the pages of the mappings in `text` (the format of `/proc/PID/smaps`) over the
/// ranges `(start, len)`; a mapping overlapping a range partly counts in proportion to the
/// overlap. Overlapping ranges are counted once per range.
pub fn parse_smaps(text: &str, ranges: &[(usize, usize)]) -> SmapsPages {
    let mut p = SmapsPages::default();
    for m in mappings(text) {
        let size = m.end - m.start;
        let mut touched = false;
        for &(start, len) in ranges {
            let end = start.saturating_add(len);
            let overlap = end.min(m.end).saturating_sub(start.max(m.start));
            if overlap == 0 {
                continue;
            }
            touched = true;
            let share = |x: usize| (x as u128 * overlap as u128 / size as u128) as usize;
            if m.hugetlb > 0 || m.kernel_page > 4096 {
                let r = share(m.hugetlb);
                p.resident = p.resident.saturating_add(r);
                if m.kernel_page == crate::huge::HUGE_PAGE {
                    p.hugetlb_2m = p.hugetlb_2m.saturating_add(r);
                } else {
                    p.hugetlb_other = p.hugetlb_other.saturating_add(r);
                }
            } else {
                p.resident = p.resident.saturating_add(share(m.rss));
                p.thp = p.thp.saturating_add(share(m.thp.min(m.rss)));
            }
        }
        p.mappings += touched as usize;
    }
    p
}

/// The whole mappings in `text` that contain at least one of `addrs`, as `(start, len)`, each
/// once, in address order.
pub fn mappings_holding(text: &str, addrs: &[usize]) -> Vec<(usize, usize)> {
    mappings(text)
        .into_iter()
        .filter(|m| addrs.iter().any(|&a| (m.start..m.end).contains(&a)))
        .map(|m| (m.start, m.end - m.start))
        .collect()
}

fn read_smaps() -> std::io::Result<String> {
    std::fs::read_to_string("/proc/self/smaps")
}

/// [`parse_smaps`] of this process's `/proc/self/smaps`.
pub fn measure_ranges(ranges: &[(usize, usize)]) -> std::io::Result<SmapsPages> {
    Ok(parse_smaps(&read_smaps()?, ranges))
}

/// The pages of the whole mappings of this process that hold any of `addrs` (addresses of a
/// structure's elements, where the structure does not say where its arrays are).
pub fn measure_mappings_holding(addrs: &[usize]) -> std::io::Result<SmapsPages> {
    let text = read_smaps()?;
    Ok(parse_smaps(&text, &mappings_holding(&text, addrs)))
}

/// The mappings of this process at one moment, to measure the ones that appear later (a
/// structure built in between whose arrays are private to its crate).
#[derive(Clone, Debug)]
pub struct MapSnapshot {
    ranges: Vec<(usize, usize)>,
}

impl MapSnapshot {
    /// The mappings now.
    pub fn take() -> std::io::Result<MapSnapshot> {
        Ok(MapSnapshot::from_smaps(&read_smaps()?))
    }

    /// The mappings of an smaps text.
    pub fn from_smaps(text: &str) -> MapSnapshot {
        MapSnapshot {
            ranges: mappings(text).iter().map(|m| (m.start, m.end)).collect(),
        }
    }

    /// The address ranges `(start, len)` mapped in `text` and not in this snapshot: new
    /// mappings whole, and the part of a mapping beyond a snapshot's mapping with the same
    /// start (a heap that grew).
    pub fn new_ranges(&self, text: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for m in mappings(text) {
            match self.ranges.iter().find(|r| r.0 == m.start) {
                Some(&(_, old_end)) if old_end >= m.end => {}
                Some(&(_, old_end)) => out.push((old_end, m.end - old_end)),
                None => out.push((m.start, m.end - m.start)),
            }
        }
        out
    }

    /// The pages of the mappings that appeared since the snapshot was taken.
    pub fn measure_new(&self) -> std::io::Result<SmapsPages> {
        let text = read_smaps()?;
        Ok(parse_smaps(&text, &self.new_ranges(&text)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Three mappings as the kernel prints them: a 4 KB heap, a THP-backed anonymous array
    /// (half on 2 MB pages) and a hugetlbfs mapping of DPDK's (2 MB pages).
    const SAMPLE: &str = "\
55c533584000-55c5335a5000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                 132 kB
Pss:                 132 kB
AnonHugePages:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
VmFlags: rd wr mr mw me ac sd
7f1000000000-7f1000800000 rw-p 00000000 00:00 0
Size:               8192 kB
KernelPageSize:        4 kB
MMUPageSize:           4 kB
Rss:                8192 kB
Pss:                8192 kB
AnonHugePages:      4096 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
THPeligible:           1
VmFlags: rd wr mr mw me ac sd hg
100200000-100600000 rw-s 00000000 00:2f 12345                      /run/scalebricks-huge/rtemap_0
Size:               4096 kB
KernelPageSize:     2048 kB
MMUPageSize:        2048 kB
Rss:                   0 kB
Pss:                   0 kB
AnonHugePages:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:    4096 kB
VmFlags: rd wr sh mr mw me ms de ht sd
";

    #[test]
    fn small_pages_of_the_heap() {
        let p = parse_smaps(SAMPLE, &[(0x55c5_3358_4000, 132 << 10)]);
        assert_eq!(p.resident, 132 << 10);
        assert_eq!((p.thp, p.hugetlb_2m, p.mappings), (0, 0, 1));
        assert_eq!(p.page_info().label(), "4K");
    }

    #[test]
    fn transparent_huge_pages_in_proportion_to_the_overlap() {
        let whole = parse_smaps(SAMPLE, &[(0x7f10_0000_0000, 8 << 20)]);
        assert_eq!((whole.resident, whole.thp), (8 << 20, 4 << 20));
        assert_eq!(whole.page_info().label(), "mixed (50% 2M)");
        // The first quarter of the mapping: a quarter of its counters.
        let part = parse_smaps(SAMPLE, &[(0x7f0f_ffff_f000, (2 << 20) + 0x1000)]);
        assert_eq!((part.resident, part.thp), (2 << 20, 1 << 20));
    }

    #[test]
    fn hugetlbfs_counts_its_hugetlb_counters_not_rss() {
        let p = parse_smaps(SAMPLE, &[(0x1_0020_0000, 4 << 20)]);
        assert_eq!((p.resident, p.hugetlb_2m, p.thp), (4 << 20, 4 << 20, 0));
        let info = p.page_info();
        assert_eq!(info.label(), "2M");
        assert_eq!(info.hugetlb_bytes, 4 << 20);
        assert_eq!(
            info.detail(),
            "4.0 MiB: 100.0% hugetlbfs 2M, 0.0% THP 2M, 0.0% 4K"
        );
    }

    #[test]
    fn one_gigabyte_hugetlb_pages_are_not_called_2m() {
        let text = SAMPLE.replace("KernelPageSize:     2048 kB", "KernelPageSize:  1048576 kB");
        let p = parse_smaps(&text, &[(0x1_0020_0000, 4 << 20)]);
        assert_eq!((p.hugetlb_2m, p.hugetlb_other), (0, 4 << 20));
        assert_eq!(p.page_info().label(), "4K");
    }

    #[test]
    fn several_ranges_and_no_overlap() {
        let all = parse_smaps(
            SAMPLE,
            &[
                (0x55c5_3358_4000, 132 << 10),
                (0x7f10_0000_0000, 8 << 20),
                (0x1_0020_0000, 4 << 20),
            ],
        );
        assert_eq!(all.mappings, 3);
        assert_eq!(all.resident, (132 << 10) + (8 << 20) + (4 << 20));
        assert_eq!(all.page_info().huge_bytes, 8 << 20);
        assert_eq!(
            parse_smaps(SAMPLE, &[(0x1000, 0x1000)]),
            SmapsPages::default()
        );
        assert_eq!(parse_smaps(SAMPLE, &[]), SmapsPages::default());
    }

    #[test]
    fn mappings_holding_addresses_and_snapshots() {
        let m = mappings_holding(SAMPLE, &[0x7f10_0000_0010, 0x7f10_0000_0020, 0x10]);
        assert_eq!(m, vec![(0x7f10_0000_0000, 8 << 20)]);
        let before = MapSnapshot::from_smaps(SAMPLE);
        assert!(before.new_ranges(SAMPLE).is_empty());
        // The heap grew by 4 KB and a new mapping appeared.
        let after = SAMPLE.replace("55c5335a5000", "55c5335a6000")
            + "7f2000000000-7f2000001000 rw-p 00000000 00:00 0\nRss: 4 kB\n";
        assert_eq!(
            before.new_ranges(&after),
            vec![(0x55c5_335a_5000, 0x1000), (0x7f20_0000_0000, 0x1000)]
        );
    }

    #[test]
    fn this_process_has_mappings() {
        let x = Box::new([7u8; 64]);
        let p = measure_mappings_holding(&[x.as_ptr() as usize]).unwrap();
        assert_eq!(p.mappings, 1);
        assert!(p.resident >= 4096);
    }

    proptest! {
        #[test]
        fn never_panics_on_any_text(text in ".{0,400}", start in any::<usize>(), len in any::<usize>()) {
            let p = parse_smaps(&text, &[(start, len)]);
            prop_assert!(p.thp <= p.resident);
            let _ = mappings_holding(&text, &[start]);
            let _ = MapSnapshot::from_smaps(&text).new_ranges(&text);
        }

        #[test]
        fn never_panics_on_smaps_like_lines(
            lines in proptest::collection::vec(
                prop_oneof![
                    "[0-9a-f]{1,17}-[0-9a-f]{1,17} rw-p 00000000 00:00 0",
                    "(Rss|KernelPageSize|AnonHugePages|Private_Hugetlb): +[0-9]{1,22} kB",
                    ".{0,40}",
                ],
                0..20,
            ),
            start in any::<usize>(),
            len in any::<usize>(),
        ) {
            let text = lines.join("\n");
            let p = parse_smaps(&text, &[(start, len)]);
            prop_assert!(p.page_info().huge_bytes <= p.page_info().bytes);
        }
    }
}
