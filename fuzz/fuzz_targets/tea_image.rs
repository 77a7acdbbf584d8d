#![no_main]

// A memory server's image file (`scalebricks tea-server` loads one written by the switch):
// never panics; an image it accepts is written back in a form it loads to the same image.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(s) = sb_tea_net::server::MemoryServer::from_image(data) {
        let again = s.image();
        let t = sb_tea_net::server::MemoryServer::from_image(&again)
            .expect("an image the server wrote loads");
        assert_eq!(t.image(), again);
    }
});
