//! Fuzzes `Superblock::decode` (persist::format_checks::superblock): never a panic, and what
//! decodes encodes back to its bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rampart_core::persist::format_checks::superblock(data));
