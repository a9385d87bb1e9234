//! The backup pair in a check (decision 0123): `checkpoint.prev` and `journal.prev`, which with
//! the journal rebuild the state when the checkpoint is damaged or was deleted. Then the
//! damage is a problem `--repair` mends (a new checkpoint from the chain), not an
//! unrepairable one. With a sound checkpoint, a backup that cannot be used is a warning: the
//! store is whole, only its spare is lost (the next checkpoint makes a new one).

use super::{Ctx, Report};
use crate::engine::State;
use crate::persist::backup;
use crate::persist::recovery::{self, CHECKPOINT_FILE, CHECKPOINT_PREV, JOURNAL_PREV};

/// Checks the backup pair, after the checkpoint phase. Returns the chain's state and recovery
/// report when it stands in for the checkpoint: damaged, or missing while `checkpoint.prev` is
/// there (not another store's or a newer rampart's: no damage, never replaced on a guess, as
/// at mount).
pub(super) fn check(r: &mut Report, ctx: &Ctx<'_>) -> Option<(State, recovery::Report)> {
    r.backup.present = backup::present(ctx.device.as_ref());
    let checkpoint_lost = if r.checkpoint.present {
        r.checkpoint.damaged
    } else {
        r.backup.present
    };
    if !r.backup.present {
        return None;
    }
    if checkpoint_lost && !r.checkpoint.present {
        r.problems.push(format!(
            "the checkpoint {} is missing, though the store has had one ({} is there): it \
             was deleted",
            ctx.file(CHECKPOINT_FILE).display(),
            ctx.file(CHECKPOINT_PREV).display()
        ));
    }
    let chain = backup::replay_chain(ctx.device.as_ref(), ctx.store_id, &ctx.config);
    let (prev, prev_journal) = (ctx.file(CHECKPOINT_PREV), ctx.file(JOURNAL_PREV));
    let (state, report) = match chain {
        Ok(chain) => chain,
        Err(why) => {
            let what = format!(
                "the backup {} and {} cannot be used: {why}",
                prev.display(),
                prev_journal.display()
            );
            r.backup.error = Some(why);
            if checkpoint_lost {
                r.problems.push(what);
            } else {
                r.warnings.push(format!(
                    "{what}; the store does not need it while its checkpoint is sound (a \
                     damaged journal is reported on its own), and the next checkpoint makes a \
                     new one"
                ));
            }
            return None;
        }
    };
    r.backup.usable = true;
    if !checkpoint_lost {
        return None;
    }
    r.backup.used = true;
    r.unrepairable = None;
    r.problems.push(format!(
        "the backup {} and {}, replayed with the journal up to op {}, rebuild the store: \
         `rampart fsck --repair` writes a new checkpoint {} from them",
        prev.display(),
        prev_journal.display(),
        report.next_seq,
        ctx.file(CHECKPOINT_FILE).display()
    ));
    r.replay.done = true;
    r.replay.batches = report.batches_replayed;
    r.replay.ops_applied = report.ops_replayed;
    r.replay.ops_skipped = report.ops_skipped;
    Some((state, report))
}
