//! Fuzzes `journal::scan` (persist::format_checks): on arbitrary bytes, on arbitrary bytes
//! after a valid header, and on a valid journal with bytes flipped and its end cut. Never a
//! panic; the batches found continue each other and decode canonically; the batches before
//! the first change are all found, unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_core::persist::format_checks;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the input's shape; the rest is passed on.
    match data.split_first() {
        Some((shape, rest)) if shape & 0x80 != 0 => format_checks::journal_mutated(rest),
        _ => format_checks::journal(data),
    }
});
