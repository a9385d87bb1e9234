//! The memory tier: small-file contents held in RAM, and the budget that caps the memory held.

pub mod budget;
pub mod file_data;

/// Heap bytes a `Vec` with `capacity` elements of `element_bytes` adds when it must hold
/// `needed`: it grows as std's does, to at least twice its capacity and at least 4 elements
/// (for elements up to 1 KiB). Used to refuse an insert before it happens.
pub fn vec_growth_bytes(capacity: usize, needed: usize, element_bytes: usize) -> u64 {
    debug_assert!(
        element_bytes <= 1024,
        "std's minimum capacity differs past 1 KiB"
    );
    if needed <= capacity {
        return 0;
    }
    let grown = needed.max(capacity * 2).max(4);
    ((grown - capacity) * element_bytes) as u64
}

#[cfg(test)]
mod tests {
    use super::vec_growth_bytes;

    /// The prediction must match what std really does, or an insert could pass the cap.
    #[test]
    fn vec_growth_matches_std() {
        fn check<T: Default>() {
            let size = std::mem::size_of::<T>();
            let mut v: Vec<T> = Vec::new();
            for needed in 1..5000 {
                let before = v.capacity();
                let predicted = vec_growth_bytes(before, needed, size);
                v.resize_with(needed, T::default);
                assert_eq!(
                    predicted,
                    ((v.capacity() - before) * size) as u64,
                    "at {needed}"
                );
            }
        }
        check::<Vec<u8>>();
        check::<Option<crate::namespace::inode::Inode>>();
        check::<[u64; 12]>();
    }
}
