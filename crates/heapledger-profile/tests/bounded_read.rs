//! Reading is bounded (issue 29, items 7 and 8): what is not a profile is
//! refused from its first bytes, or before it is opened, taking little
//! memory and no time; a profile with values no real profile can have is
//! reported as damaged; every message is one short line.

mod common;
mod counting;

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use counting::peak_of;
use heapledger_profile::{Profile, ProfileError};

/// The most memory refusing an input may take: the first 64 KiB read, and
/// the parser's work on them.
const SMALL: usize = 1 << 20;

/// Reads `path` and checks the error is one short line naming it, taken
/// within a second and [`SMALL`] bytes.
fn refused(path: &Path) -> ProfileError {
    let start = Instant::now();
    let (result, peak) = peak_of(|| Profile::from_path(path));
    let took = start.elapsed();
    let err = result.expect_err("read as a profile");
    let msg = err.to_string();
    assert!(took < Duration::from_secs(1), "{msg}: took {took:?}");
    assert!(peak < SMALL, "{msg}: took {peak} bytes");
    assert!(!msg.contains('\n') && msg.chars().count() < 300, "{msg}");
    let name = path.file_name().unwrap().to_string_lossy();
    assert!(msg.contains(name.as_ref()), "{msg}");
    err
}

#[test]
fn devices_are_refused_unread() {
    for dev in ["/dev/zero", "/dev/urandom", "/dev/null", "/dev/full"] {
        let err = refused(Path::new(dev));
        assert!(
            matches!(err, ProfileError::NotAFile { .. }),
            "{dev}: {err:?}"
        );
        assert!(err.to_string().contains("character device"), "{err}");
    }
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let dir = common::scratch("fifo");
    let fifo = dir.join("profile.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    // Opening it would wait for a writer forever: it must not be opened.
    let err = refused(&fifo);
    assert!(matches!(err, ProfileError::NotAFile { .. }), "{err:?}");
    assert!(err.to_string().contains("FIFO"), "{err}");
}

#[test]
fn a_socket_is_refused() {
    let dir = common::scratch("socket");
    let path = dir.join("profile.json");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let err = refused(&path);
    assert!(err.to_string().contains("a socket"), "{err}");
}

/// A big file (sparse: no disk is used) that is not a profile is refused
/// from its first bytes: only they are read.
#[test]
fn a_big_file_is_judged_by_its_head() {
    let dir = common::scratch("big");
    const BIG: u64 = 4 << 30;
    let cases: [(&str, &[u8], &str); 5] = [
        ("zeros.json", b"", "zero byte"),
        ("brace-then-zeros.json", b"{", "not a JSON profile"),
        ("text.json", b"hello world", "not a JSON profile"),
        ("array.json", b"[1, 2, 3,", "the top level is an array"),
        ("blank.json", b"   ", "blank space"),
    ];
    for (name, start, says) in cases {
        let path = dir.join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(start).unwrap();
        // Past the head: blank space, numbers of the array.
        match name {
            "blank.json" => f.write_all(&[b' '; 100 << 10]).unwrap(),
            "array.json" => f.write_all(&b"4, ".repeat(30 << 10)).unwrap(),
            _ => {}
        }
        f.set_len(BIG).unwrap();
        drop(f);
        let err = refused(&path);
        assert!(err.to_string().contains(says), "{name}: {err}");
    }
}

/// A file that grows while it is read is read no further than its length
/// when opened (here: /proc/self/... files say 0 and are small; a regular
/// file is cut at its length).
#[test]
fn a_regular_file_is_read_up_to_its_length() {
    let bytes = common::sample_bytes();
    let dir = common::scratch("len");
    let path = dir.join("p.json");
    std::fs::write(&path, &bytes).unwrap();
    let (p, peak) = peak_of(|| Profile::from_path(&path));
    p.unwrap();
    // The file, once (its length is known), and the profile.
    assert!(peak < 16 * bytes.len(), "{peak} bytes for {}", bytes.len());
}

/// An endless reader that is not a profile is refused after its head.
#[test]
fn an_endless_reader_is_refused_from_its_head() {
    let cases: [(u8, &str); 4] = [
        (0, "zero byte"),
        (b' ', "blank space"),
        (b'x', "not a JSON profile"),
        (b'[', "the top level is an array"),
    ];
    for (byte, says) in cases {
        let (r, peak) = peak_of(|| Profile::from_reader(std::io::repeat(byte).take(u64::MAX)));
        let err = r.unwrap_err();
        assert!(peak < SMALL, "{byte}: {peak} bytes");
        assert!(err.to_string().contains(says), "{byte}: {err}");
    }
}

/// The sample, with `from` replaced by `to` once.
fn sample_with(from: &str, to: &str) -> Vec<u8> {
    let text = String::from_utf8(common::sample_bytes()).unwrap();
    let damaged = text.replacen(from, to, 1);
    assert_ne!(damaged, text, "{from} is not in the sample");
    damaged.into_bytes()
}

/// Checks the error is one line under 300 characters; returns it.
fn one_short_line(err: &ProfileError) -> String {
    let msg = err.to_string();
    assert!(
        !msg.contains('\n') && msg.chars().count() < 300,
        "{} characters: {msg}",
        msg.chars().count()
    );
    msg
}

#[test]
fn impossible_values_are_damage() {
    let max = u64::MAX.to_string();
    let cases = [
        ("\"runtime\": ", "run.runtime"),
        ("\"totalMemory\": ", "globals.totalMemory"),
        ("\"maxThreadCount\": ", "globals.maxThreadCount"),
        ("\"memory\": ", "leaks[0].memory"),
        ("\"cntMemOps\": ", "threads[0].cntMemOps"),
    ];
    let text = String::from_utf8(common::sample_bytes()).unwrap();
    for (key, field) in cases {
        // The first number after `key`, replaced by u64::MAX.
        let at = text.find(key).unwrap_or_else(|| panic!("{key}")) + key.len();
        let end = at + text[at..].find(|c: char| !c.is_ascii_digit()).unwrap();
        let damaged = format!("{}{max}{}", &text[..at], &text[end..]);
        let err = Profile::from_slice_named(damaged.as_bytes(), "d.json").unwrap_err();
        assert!(matches!(err, ProfileError::Malformed { .. }), "{err:?}");
        let msg = one_short_line(&err);
        assert!(
            msg.contains("is damaged") && msg.contains(field) && msg.contains(&max),
            "{msg}"
        );
        assert!(!msg.contains("EiB"), "{msg}");
    }
    // Sizes over 2^57 bytes alive: damage; 2^40 (1 TiB) is fine.
    for (value, ok) in [(1u64 << 40, true), (1 << 58, false)] {
        let key = "\"memory\": ";
        let at = text.find(key).unwrap() + key.len();
        let end = at + text[at..].find(|c: char| !c.is_ascii_digit()).unwrap();
        let damaged = format!("{}{value}{}", &text[..at], &text[end..]);
        assert_eq!(
            Profile::from_slice(damaged.as_bytes()).is_ok(),
            ok,
            "{value}"
        );
    }
}

#[test]
fn long_values_are_cut_in_messages() {
    let long = "x".repeat(10_000);
    let quoted = format!("\"{long}\"");
    let cases = [
        // A string where a number goes.
        sample_with("\"count\": 12", &format!("\"count\": {quoted}")),
        // A format version of 10 000 characters.
        sample_with(
            "\"formatVersion\": \"1.6\"",
            &format!("\"formatVersion\": {quoted}"),
        ),
        // A format version that is a long array.
        sample_with(
            "\"formatVersion\": \"1.6\"",
            &format!("\"formatVersion\": [{}1]", "1,".repeat(5000)),
        ),
        // A key no profile has, with a long name, where one is required.
        sample_with("\"run\"", &quoted),
        // Control characters (a terminal's escape) in a quoted value.
        sample_with("\"count\": 12", "\"count\": \"\\u001b[2J\\n\\r\""),
    ];
    for bytes in cases {
        let err = Profile::from_slice(&bytes).unwrap_err();
        let msg = one_short_line(&err);
        assert!(!msg.chars().any(char::is_control), "{msg:?}");
    }
}
