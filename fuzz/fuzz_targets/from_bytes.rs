//! SetSep::from_bytes / SetSepView::from_bytes on arbitrary bytes: never panics, and whatever is
//! accepted answers lookups and serializes back to the same bytes.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    sb_setsep::fuzzing::load_table(data);
});
