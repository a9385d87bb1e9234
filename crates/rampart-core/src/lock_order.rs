//! The lock order, written down and checked in debug builds.
//!
//! Locks are taken in increasing [`Rank`]; a thread that holds a lock may take only locks of a
//! higher rank. The order (docs/ARCHITECTURE.md, "Threads and locks"):
//!
//! 0. `HostFile` — a disk-tier file's host-file lock (a stripe of `disk::HostLocks`): held
//!    across a write to the host file and the op that follows it, and across a trim and the
//!    sync that must come before it (so the persister's locks come after it).
//! 1. `PersisterWriting` — the persister's writing lock (one writer of the journal at a time;
//!    a checkpoint holds it while it swaps files).
//! 2. `EngineState` — the engine's state lock (shared for reads, exclusive for ops).
//! 3. `PersisterPending` — the batch of ops waiting to be written (taken by `Level::applied`
//!    under the engine's exclusive lock).
//! 4. `PersisterDurable` — what is known durable, and the waiters for it.
//!
//! Each lock site calls [`acquire`] with its rank and keeps the returned [`Held`] as long as
//! the lock. In debug builds a thread-local stack of held ranks checks the order and panics
//! on a violation, naming both locks; in release builds it costs nothing.

/// A lock's place in the order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    HostFile = 0,
    PersisterWriting = 1,
    EngineState = 2,
    PersisterPending = 3,
    PersisterDurable = 4,
}

/// Proof that a rank was acquired in order; releases it when dropped.
#[must_use = "the rank is held as long as this value"]
pub struct Held {
    #[cfg(debug_assertions)]
    rank: Rank,
}

#[cfg(debug_assertions)]
thread_local! {
    static HELD: std::cell::RefCell<Vec<Rank>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Records that this thread takes a lock of `rank` (debug builds check the order).
pub fn acquire(rank: Rank) -> Held {
    #[cfg(debug_assertions)]
    {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(&top) = held.last() {
                assert!(
                    rank > top,
                    "lock order violated: taking {rank:?} while holding {top:?}"
                );
            }
            held.push(rank);
        });
        Held { rank }
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = rank;
        Held {}
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            // Guards may be dropped out of order (two locks released in the order taken).
            if let Some(at) = held.iter().rposition(|&r| r == self.rank) {
                held.remove(at);
            }
        });
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn increasing_ranks_pass_and_are_released() {
        let a = acquire(Rank::PersisterWriting);
        let b = acquire(Rank::EngineState);
        drop(a);
        drop(b);
        let _c = acquire(Rank::PersisterWriting);
    }

    #[test]
    #[should_panic(expected = "lock order violated")]
    fn a_lower_rank_under_a_higher_one_panics() {
        let _a = acquire(Rank::PersisterPending);
        let _b = acquire(Rank::EngineState);
    }
}
