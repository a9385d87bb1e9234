//! MBFS (USENIX 1999) §7, the edit test (test 4): an editing session, the one §7 workload
//! whose data needs disk persistence. The paper gives no sizes, so the session is made of what
//! editors and mail programs do when they save (decision 0109): source files of a few KiB, each
//! opened, read, changed and saved several times the way editors save — the new version written
//! to a temporary name in the same directory, fsync'd, renamed over the original, the directory
//! fsync'd — and a few mails composed and saved to an outbox the same way.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::data::{close_checked, group_digits, io_err, sync_and_fsync_dir, SplitMix64};
use super::{Ctx, Metric, Outcome, PlotKind, Workload};
use crate::error::{BenchError, Result};
use crate::profile::Profile;

pub fn workloads() -> Vec<Box<dyn Workload>> {
    vec![Box::new(EditSession)]
}

/// The names the session gives its files; rampart-edited's rule (`EDITED_CONFIG` in
/// peer/rampart.rs) makes exactly these EDITED: sources `*.c`, mails `*.eml`, and their
/// temporary names while saved (`*.new`), so the version renamed over the original is EDITED.
pub const EDITED_REGEX: &str = r"\.(c|eml)(\.new)?$";
pub(crate) const SOURCE_SUFFIX: &str = ".c";
pub(crate) const MAIL_SUFFIX: &str = ".eml";
pub(crate) const TEMP_SUFFIX: &str = ".new";

/// Source files: 2–8 KiB of text, the size of most files of a C or Rust tree.
const SOURCE_BYTES_MIN: usize = 2 << 10;
const SOURCE_BYTES_MAX: usize = 8 << 10;
/// A mail: headers and 2–6 paragraphs of 300–700 bytes, written one paragraph per write.
const MAIL_PARAGRAPHS_MIN: usize = 2;
const MAIL_PARAGRAPHS_MAX: usize = 6;
const PARAGRAPH_BYTES_MIN: usize = 300;
const PARAGRAPH_BYTES_MAX: usize = 700;
/// Seed of the session's text and choices.
const SEED: u64 = 0xed17_1999;

/// (source files, edit rounds) per profile; one mail is composed per round.
fn scale(profile: Profile) -> (usize, usize) {
    profile.pick((4, 2), (20, 5), (50, 10))
}

struct EditSession;

impl Workload for EditSession {
    fn id(&self) -> &'static str {
        "mbfs-edit"
    }

    fn title(&self) -> &'static str {
        "MBFS edit test: an editing session (saves of source files and mails)"
    }

    fn source(&self) -> &'static str {
        "MBFS (USENIX 1999) §7, test 4 (the paper names the test, not its sizes: decision 0109)"
    }

    fn settings(&self, profile: Profile) -> Vec<(String, String)> {
        let (files, rounds) = scale(profile);
        vec![
            (
                "session".into(),
                format!(
                    "{files} source files (*.c) of {}–{} KiB of text, created and fsync'd \
                     before timing; then {rounds} rounds, each saving every source file once \
                     and composing one mail: {} saves and {rounds} mails",
                    SOURCE_BYTES_MIN >> 10,
                    SOURCE_BYTES_MAX >> 10,
                    group_digits((files * rounds) as u64)
                ),
            ),
            (
                "a save".into(),
                "open and read the file; change one line and add one; write the whole new \
                 version to NAME.new in the same directory, fsync it, close it, rename it \
                 over NAME, fsync the directory (what vim with backupcopy=no, emacs and most \
                 editors do so that a crash leaves the old or the new version, never half)"
                    .into(),
            ),
            (
                "a mail".into(),
                format!(
                    "created as drafts/msg-N.eml{TEMP_SUFFIX}, headers then {MAIL_PARAGRAPHS_MIN}–\
                     {MAIL_PARAGRAPHS_MAX} paragraphs of {PARAGRAPH_BYTES_MIN}–\
                     {PARAGRAPH_BYTES_MAX} B, one write each (typed, then saved), fsync'd, \
                     closed, renamed to outbox/msg-N.eml, the outbox fsync'd"
                ),
            ),
            (
                "why these sizes".into(),
                "MBFS §7 names an edit test and says it is the one that needs disk \
                 persistence, without sizes; a few KiB is the size of a typical source file, \
                 and several saves per file the rhythm of an edit-compile cycle; the mails \
                 are the paper's 'composing mail' in the same session"
                    .into(),
            ),
            (
                "categories".into(),
                format!(
                    "on rampart-edited the files are EDITED by a rule (regex {EDITED_REGEX:?}: \
                     close returns once the file is in the store); on every other peer they \
                     are created as the peer creates any file"
                ),
            ),
            (
                "check".into(),
                "after the session (untimed) every source file and mail is read back and \
                 compared with what was saved"
                    .into(),
            ),
            (
                "metrics".into(),
                "saves/s = (source saves + mails) / session time; the mean time of one source \
                 save and of one mail"
                    .into(),
            ),
            (
                "on host-fsync".into(),
                "runs as everywhere: the session already fsyncs every file it saves".into(),
            ),
        ]
    }

    fn fsyncs_each_file(&self) -> bool {
        true
    }

    fn plot(&self) -> PlotKind {
        PlotKind::PhaseBars
    }

    fn run(&self, ctx: &mut Ctx) -> Result<Outcome> {
        let (files, rounds) = scale(ctx.profile);
        let root = ctx.dir.join("session");
        let src = root.join("src");
        let drafts = root.join("mail").join("drafts");
        let outbox = root.join("mail").join("outbox");
        for dir in [&src, &drafts, &outbox] {
            std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        }
        (ctx.progress)("creating the source files");
        let mut rng = SplitMix64(SEED);
        let mut sources = Vec::with_capacity(files);
        for i in 0..files {
            let size = pick(&mut rng, SOURCE_BYTES_MIN, SOURCE_BYTES_MAX);
            let text = text_lines(&mut rng, size);
            let path = src.join(format!("file-{i:03}{SOURCE_SUFFIX}"));
            write_synced(&path, &[&text])?;
            sources.push((path, text));
        }
        sync_and_fsync_dir(&ctx.dir)?;
        sync_and_fsync_dir(&src)?;

        let mut save_time = Duration::ZERO;
        let mut mail_time = Duration::ZERO;
        let mut mails = Vec::with_capacity(rounds);
        let started = Instant::now();
        for round in 0..rounds {
            ctx.cancel.check()?;
            (ctx.progress)(&format!("round {}/{rounds}", round + 1));
            for (path, expected) in sources.iter_mut() {
                let t0 = Instant::now();
                *expected = save_edit(path, &mut rng)?;
                save_time += t0.elapsed();
            }
            let t0 = Instant::now();
            mails.push(compose_mail(&drafts, &outbox, round, &mut rng)?);
            mail_time += t0.elapsed();
        }
        let session = started.elapsed();
        (ctx.progress)("checking what was saved");
        for (path, expected) in sources.iter().chain(&mails) {
            let found = std::fs::read(path).map_err(io_err("reading", path))?;
            if &found != expected {
                return Err(BenchError::Other(format!(
                    "{} holds {} bytes, not the {} last saved",
                    path.display(),
                    found.len(),
                    expected.len()
                )));
            }
        }
        let saves = files * rounds;
        Ok(Outcome {
            metrics: vec![
                Metric::rate("saves", "saves/s", (saves + rounds) as f64, session),
                Metric::lower(
                    "source save",
                    "ms",
                    save_time.as_secs_f64() * 1e3 / saves as f64,
                ),
                Metric::lower("mail", "ms", mail_time.as_secs_f64() * 1e3 / rounds as f64),
            ],
            notes: vec![format!(
                "{saves} source saves and {rounds} mails in {:.3} s; {} fsync(2) of files \
                 and {} of directories",
                session.as_secs_f64(),
                saves + rounds,
                saves + rounds
            )],
        })
    }
}

/// A number in [low, high].
fn pick(rng: &mut SplitMix64, low: usize, high: usize) -> usize {
    low + (rng.next_u64() % (high - low + 1) as u64) as usize
}

/// `size_bytes` of source-like text: lines of 8–72 printable characters.
fn text_lines(rng: &mut SplitMix64, size_bytes: usize) -> Vec<u8> {
    let mut text = Vec::with_capacity(size_bytes + 80);
    while text.len() < size_bytes {
        text.extend(line(rng));
    }
    text.truncate(size_bytes.saturating_sub(1));
    text.push(b'\n');
    text
}

fn line(rng: &mut SplitMix64) -> Vec<u8> {
    let len = pick(rng, 8, 72);
    let mut l: Vec<u8> = (0..len)
        .map(|_| b' ' + (rng.next_u64() % 95) as u8)
        .collect();
    l.push(b'\n');
    l
}

/// One save of a source file, as an editor makes it; returns the new contents.
fn save_edit(path: &Path, rng: &mut SplitMix64) -> Result<Vec<u8>> {
    let mut old = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut old))
        .map_err(io_err("reading", path))?;
    // Change one line and add one after it.
    let starts: Vec<usize> = std::iter::once(0)
        .chain(
            old.iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        )
        .filter(|&i| i < old.len())
        .collect();
    let at = starts[(rng.next_u64() % starts.len() as u64) as usize];
    let end = old[at..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(old.len(), |p| at + p + 1);
    let mut new = Vec::with_capacity(old.len() + 160);
    new.extend_from_slice(&old[..at]);
    new.extend(line(rng));
    new.extend(line(rng));
    new.extend_from_slice(&old[end..]);
    let temp = with_suffix(path, TEMP_SUFFIX);
    write_synced(&temp, &[&new])?;
    std::fs::rename(&temp, path).map_err(io_err("renaming over", path))?;
    fsync_dir(path.parent().expect("a source file has a directory"))?;
    Ok(new)
}

/// Composes mail `n`: a draft written paragraph by paragraph, saved, moved to the outbox.
fn compose_mail(
    drafts: &Path,
    outbox: &Path,
    n: usize,
    rng: &mut SplitMix64,
) -> Result<(PathBuf, Vec<u8>)> {
    let name = format!("msg-{n:03}{MAIL_SUFFIX}");
    let draft = drafts.join(format!("{name}{TEMP_SUFFIX}"));
    let headers = format!(
        "From: bench@localhost\nTo: list@localhost\nSubject: edit session {n}\n\
         Message-ID: <{n}.{:x}@localhost>\n\n",
        rng.next_u64()
    )
    .into_bytes();
    let paragraphs: Vec<Vec<u8>> = (0..pick(rng, MAIL_PARAGRAPHS_MIN, MAIL_PARAGRAPHS_MAX))
        .map(|_| {
            let size = pick(rng, PARAGRAPH_BYTES_MIN, PARAGRAPH_BYTES_MAX);
            let mut p = text_lines(rng, size);
            p.push(b'\n');
            p
        })
        .collect();
    let mut parts: Vec<&[u8]> = vec![&headers];
    parts.extend(paragraphs.iter().map(Vec::as_slice));
    write_synced(&draft, &parts)?;
    let sent = outbox.join(&name);
    std::fs::rename(&draft, &sent).map_err(io_err("moving into the outbox", &sent))?;
    fsync_dir(outbox)?;
    Ok((sent, parts.concat()))
}

/// Creates (or truncates) `path`, writes `parts` one write each, fsyncs and closes it.
fn write_synced(path: &Path, parts: &[&[u8]]) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(io_err("creating", path))?;
    for part in parts {
        file.write_all(part).map_err(io_err("writing", path))?;
    }
    file.sync_all().map_err(io_err("fsync of", path))?;
    close_checked(file, path)
}

fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsync of the directory", dir))
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::run_tiny;

    #[test]
    fn a_session_saves_and_checks_every_file() {
        let outcome = run_tiny(&EditSession).unwrap();
        let names: Vec<&str> = outcome.metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["saves", "source save", "mail"]);
        for m in &outcome.metrics {
            assert!(m.value.is_finite() && m.value > 0.0, "{m:?}");
        }
        let (files, rounds) = scale(Profile::Tiny);
        let note = &outcome.notes[0];
        assert!(
            note.starts_with(&format!(
                "{} source saves and {rounds} mails",
                files * rounds
            )),
            "{note}"
        );
    }

    #[test]
    fn an_edit_changes_one_line_and_adds_one() {
        let dir = crate::testing::shm_tempdir();
        let path = dir.path().join(format!("a{SOURCE_SUFFIX}"));
        let mut rng = SplitMix64(7);
        let text = text_lines(&mut rng, 3000);
        std::fs::write(&path, &text).unwrap();
        let new = save_edit(&path, &mut rng).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), new);
        assert!(!with_suffix(&path, TEMP_SUFFIX).exists());
        let lines = |t: &[u8]| t.iter().filter(|&&b| b == b'\n').count();
        assert_eq!(lines(&new), lines(&text) + 1);
        assert_ne!(new, text);
    }
}
