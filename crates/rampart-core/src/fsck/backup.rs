//! The backup pair in a check (decision 0123): `checkpoint.prev` and `journal.prev`, which with
//! the journal rebuild the state when the checkpoint is damaged or was deleted. Then the
//! damage is a problem `--repair` mends (a new checkpoint from the chain), not an
//! unrepairable one. With a sound checkpoint, a backup that cannot be used is a warning: the
//! store is whole, only its spare is lost (the next checkpoint makes a new one).

use super::{Ctx, Report};
use crate::engine::State;
use crate::persist::backup;
use crate::persist::recovery::{
    self, CHECKPOINT_FILE, CHECKPOINT_PREV, JOURNAL_FILE, JOURNAL_PREV,
};

/// What the backup pair gives when it stands in for the checkpoint.
pub(super) struct Chain {
    pub state: State,
    pub report: recovery::Report,
    /// The journal could not continue the chain (why): its changes after the backup are
    /// lost, and `--repair` accepts the loss (decision 0133).
    pub journal_lost: Option<String>,
    /// The journal's own ops replayed onto the pair's state (not `journal.prev`'s).
    pub journal_ops_replayed: u64,
}

/// The journal cannot be read (an I/O error): the store is unrepairable, and fsck stops.
pub(super) struct Stop;

/// Checks the backup pair, after the checkpoint phase. Returns the chain's state and recovery
/// report when it stands in for the checkpoint: damaged, or missing while `checkpoint.prev` is
/// there (not another store's or a newer rampart's: no damage, never replaced on a guess, as
/// at mount).
pub(super) fn check(r: &mut Report, ctx: &Ctx<'_>) -> Result<Option<Chain>, Stop> {
    r.backup.present = backup::present(ctx.device.as_ref());
    let checkpoint_lost = if r.checkpoint.present {
        r.checkpoint.damaged
    } else {
        r.backup.present
    };
    if !r.backup.present {
        return Ok(None);
    }
    if checkpoint_lost && !r.checkpoint.present {
        r.problems.push(format!(
            "the checkpoint {} is missing, though the store has had one ({} is there): it \
             was deleted",
            ctx.file(CHECKPOINT_FILE).display(),
            ctx.file(CHECKPOINT_PREV).display()
        ));
    }
    let (prev, prev_journal) = (ctx.file(CHECKPOINT_PREV), ctx.file(JOURNAL_PREV));
    let strict = backup::replay_chain(ctx.device.as_ref(), ctx.store_id, &ctx.config);
    let chain = match strict {
        Ok((state, report)) => Chain {
            journal_ops_replayed: report.ops_replayed,
            state,
            report,
            journal_lost: None,
        },
        // Without the checkpoint, the pair alone still holds the store up to its end.
        Err(why) if checkpoint_lost => {
            let partial =
                backup::replay_chain_accepting_loss(ctx.device.as_ref(), ctx.store_id, &ctx.config);
            match partial {
                Ok((state, report, lost)) => Chain {
                    journal_ops_replayed: lost
                        .as_ref()
                        .map_or(report.ops_replayed, |l| l.journal_ops_replayed),
                    journal_lost: Some(lost.map_or(why, |l| l.why)),
                    state,
                    report,
                },
                Err(e) if e.journal_unreadable => return Err(journal_unreadable(r, ctx, e.why)),
                Err(e) => {
                    unusable(r, ctx, e.why, checkpoint_lost);
                    return Ok(None);
                }
            }
        }
        Err(why) => {
            unusable(r, ctx, why, checkpoint_lost);
            return Ok(None);
        }
    };
    r.backup.usable = chain.journal_lost.is_none();
    if !checkpoint_lost {
        return Ok(None);
    }
    r.backup.used = true;
    r.unrepairable = None;
    let journal = ctx.file(JOURNAL_FILE);
    r.problems.push(match &chain.journal_lost {
        None => format!(
            "the backup {} and {}, replayed with the journal up to op {}, rebuild the store: \
             `rampart fsck --repair` writes a new checkpoint {} from them",
            prev.display(),
            prev_journal.display(),
            chain.report.next_seq,
            ctx.file(CHECKPOINT_FILE).display()
        ),
        Some(why) => format!(
            "the backup {} and {} rebuild the store as it was at the checkpoint before the \
             last, with {} ops of the journal {} replayed onto it (and {} of {}), which \
             cannot continue it further ({why}): the changes after that are lost unless the files are restored. `rampart fsck \
             --repair` accepts the loss, writes a new checkpoint {} from the backup and links \
             host files no file uses into /lost+found",
            prev.display(),
            prev_journal.display(),
            chain.journal_ops_replayed,
            journal.display(),
            chain
                .report
                .ops_replayed
                .saturating_sub(chain.journal_ops_replayed),
            prev_journal.display(),
            ctx.file(CHECKPOINT_FILE).display()
        ),
    });
    r.replay.done = true;
    r.replay.batches = chain.report.batches_replayed;
    r.replay.ops_applied = chain.report.ops_replayed;
    r.replay.ops_skipped = chain.report.ops_skipped;
    Ok(Some(chain))
}

/// The checkpoint is lost and the journal cannot be read: an I/O error says nothing of its
/// content (it may be whole), and its changes are never given up on that.
fn journal_unreadable(r: &mut Report, ctx: &Ctx<'_>, why: String) -> Stop {
    let what = format!(
        "the checkpoint is lost and the journal {} cannot be read ({why}): it may be intact,          so fsck does not give up its changes. Make it readable (check the disk, the file's          permissions and owner) and run `rampart fsck` again",
        ctx.file(JOURNAL_FILE).display(),
    );
    r.backup.error = Some(why);
    r.problems.push(what.clone());
    r.unrepairable = Some(what);
    Stop
}

/// The backup pair cannot be used: a problem when the checkpoint is lost, else a warning.
fn unusable(r: &mut Report, ctx: &Ctx<'_>, why: String, checkpoint_lost: bool) {
    let what = format!(
        "the backup {} and {} cannot be used: {why}",
        ctx.file(CHECKPOINT_PREV).display(),
        ctx.file(JOURNAL_PREV).display()
    );
    r.backup.error = Some(why);
    if checkpoint_lost {
        r.problems.push(what);
    } else {
        r.warnings.push(format!(
            "{what}; the store does not need it while its checkpoint is sound (a damaged \
             journal is reported on its own), and the next checkpoint makes a new one"
        ));
    }
}
