//! Fuzzes `checkpoint::decode` and `decode_for_repair` (persist::format_checks): on arbitrary
//! bytes, on arbitrary bodies behind a valid header and checksum, and on a valid image with
//! bytes of its body changed. Never a panic; what decodes is consistent and re-encodes
//! canonically; what decodes for repair is consistent once repaired.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_core::persist::format_checks;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the input's shape; the rest is passed on.
    match data.split_first() {
        Some((shape, rest)) if shape & 0x80 != 0 => format_checks::checkpoint_mutated(rest),
        _ => format_checks::checkpoint(data),
    }
});
