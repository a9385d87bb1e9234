//! Fuzzes the journal's record decoder: arbitrary bytes must decode to ops or to an error,
//! never panic, and every record that decodes must re-encode to exactly its bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rampart_core::persist::codec::{decode_op, encode_op};

fuzz_target!(|data: &[u8]| {
    // The first 8 bytes, when there are that many, are the batch's base time.
    let (base, mut input) = match data.split_first_chunk::<8>() {
        Some((head, rest)) => (i64::from_le_bytes(*head), rest),
        None => (0, data),
    };
    let mut again = Vec::new();
    while !input.is_empty() {
        let before = input;
        match decode_op(&mut input, base) {
            Ok(op) => {
                let used = &before[..before.len() - input.len()];
                assert!(!used.is_empty(), "a record consumed nothing");
                again.clear();
                encode_op(&op, base, &mut again);
                assert_eq!(again, used, "the encoding of {op:?} is not canonical");
            }
            Err(_) => {
                assert_eq!(input, before, "a failed decode moved the input");
                break;
            }
        }
    }
});
