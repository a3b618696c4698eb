//! Every way a profile file can be wrong gives its own one-line error naming
//! the file; no input panics.

mod common;

use std::io::Write;

use heapledger_profile::{Profile, ProfileError};

fn write_file(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
    path
}

/// The message is one line and names the file.
fn one_line_naming(err: &ProfileError, name: &str) -> String {
    let msg = err.to_string();
    assert!(!msg.contains('\n'), "multi-line message: {msg}");
    assert!(msg.contains(name), "message does not name {name}: {msg}");
    msg
}

#[test]
fn missing_file() {
    let dir = common::scratch("missing");
    let err = Profile::from_path(dir.join("nope.json")).unwrap_err();
    assert!(matches!(err, ProfileError::NotFound { .. }), "{err:?}");
    let msg = one_line_naming(&err, "nope.json");
    assert!(msg.contains("does not exist"), "{msg}");
}

#[test]
fn unreadable_file_gives_the_os_reason() {
    let dir = common::scratch("unreadable");
    // A directory exists but cannot be read as a file, as root too.
    let err = Profile::from_path(&dir).unwrap_err();
    assert!(matches!(err, ProfileError::Unreadable { .. }), "{err:?}");
    let msg = one_line_naming(&err, "unreadable");
    assert!(msg.contains("directory"), "{msg}");
}

#[test]
fn empty_file() {
    let dir = common::scratch("empty");
    for (name, bytes) in [("empty.json", &b""[..]), ("blank.json", b"  \n\t ")] {
        let err = Profile::from_path(write_file(&dir, name, bytes)).unwrap_err();
        assert!(matches!(err, ProfileError::Empty { .. }), "{err:?}");
        assert!(one_line_naming(&err, name).contains("is empty"));
    }
}

#[test]
fn text_is_not_json() {
    let dir = common::scratch("text");
    for (name, bytes) in [
        ("text.json", &b"hello, this is a text file\n"[..]),
        ("garbage.json", b"{\"run\": nope}"),
        ("binary.json", b"\x02\x01\x01\x00binary"),
        ("trailing.json", b"{} {}"),
    ] {
        let err = Profile::from_path(write_file(&dir, name, bytes)).unwrap_err();
        assert!(
            matches!(err, ProfileError::NotJson { .. }),
            "{name}: {err:?}"
        );
        assert!(one_line_naming(&err, name).contains("not a JSON profile"));
    }
}

/// A file of a kind known by its first bytes is named as such.
#[test]
fn known_kinds_are_named() {
    let dir = common::scratch("kinds");
    for (name, bytes, says) in [
        (
            "prog.json",
            &b"\x7fELF\x02\x01\x01\x00"[..],
            "an executable",
        ),
        ("p.json.gz", b"\x1f\x8b\x08\x00", "gzip-compressed"),
        ("p.zst", b"\x28\xb5\x2f\xfd", "zstd-compressed"),
    ] {
        let err = Profile::from_path(write_file(&dir, name, bytes)).unwrap_err();
        assert!(
            matches!(err, ProfileError::Foreign { .. }),
            "{name}: {err:?}"
        );
        assert!(one_line_naming(&err, name).contains(says));
    }
}

#[test]
fn truncated_file() {
    let dir = common::scratch("truncated");
    let bytes = common::sample_bytes();
    for cut in [1, 100, bytes.len() / 2, bytes.len() - 2] {
        let name = format!("cut{cut}.json");
        let err = Profile::from_path(write_file(&dir, &name, &bytes[..cut])).unwrap_err();
        assert!(
            matches!(err, ProfileError::Truncated { .. }),
            "{cut}: {err:?}"
        );
        assert!(one_line_naming(&err, &name).contains("truncated"));
    }
}

#[test]
fn json_that_is_not_a_profile() {
    let dir = common::scratch("notprofile");
    for (name, bytes, why) in [
        ("array.json", &b"[1, 2, 3]"[..], "array"),
        ("number.json", b"42", "number"),
        ("object.json", b"{\"hello\": \"world\"}", "no `run` section"),
        (
            "norun.json",
            b"{\"run\": {\"tool\": \"x\"}}",
            "no `run.formatVersion`",
        ),
        (
            "badver.json",
            b"{\"run\": {\"formatVersion\": 1.6}}",
            "not a string",
        ),
    ] {
        let err = Profile::from_path(write_file(&dir, name, bytes)).unwrap_err();
        assert!(
            matches!(err, ProfileError::NotAProfile { .. }),
            "{name}: {err:?}"
        );
        let msg = one_line_naming(&err, name);
        assert!(
            msg.contains("not a MALT/heapledger profile") && msg.contains(why),
            "{msg}"
        );
    }
}

#[test]
fn unsupported_format_version() {
    let dir = common::scratch("version");
    // A complete profile that says 2.0, and a stub that says 0.9.
    let text = String::from_utf8(common::sample_bytes()).unwrap();
    let newer = text.replacen(
        "\"formatVersion\": \"1.6\"",
        "\"formatVersion\": \"2.0\"",
        1,
    );
    for (name, bytes) in [
        ("newer.json", newer.as_bytes()),
        (
            "older.json",
            &b"{\"run\": {\"formatVersion\": \"0.9\"}, \"x\": 1}"[..],
        ),
    ] {
        let err = Profile::from_path(write_file(&dir, name, bytes)).unwrap_err();
        assert!(
            matches!(err, ProfileError::UnsupportedVersion { .. }),
            "{name}: {err:?}"
        );
        let msg = one_line_naming(&err, name);
        assert!(msg.contains("reads only 1.6"), "{msg}");
    }
}

#[test]
fn newer_heapledger_data_is_refused() {
    let text = String::from_utf8(common::sample_bytes()).unwrap();
    let ext = r#"{"version": 7, "something": "new"}"#;
    let with_ext = format!(
        "{}, \"heapledger\": {ext}}}",
        text.trim_end().trim_end_matches('}')
    );
    let err = Profile::from_slice_named(with_ext.as_bytes(), "future.json").unwrap_err();
    assert!(
        matches!(err, ProfileError::UnsupportedExtension { .. }),
        "{err:?}"
    );
    assert!(one_line_naming(&err, "future.json").contains("version 7"));
}

#[test]
fn damaged_profile_names_the_place() {
    let text = String::from_utf8(common::sample_bytes()).unwrap();
    let damaged = text.replacen("\"count\": 12", "\"count\": \"twelve\"", 1);
    assert_ne!(damaged, text);
    let err = Profile::from_slice_named(damaged.as_bytes(), "damaged.json").unwrap_err();
    assert!(matches!(err, ProfileError::Malformed { .. }), "{err:?}");
    let msg = one_line_naming(&err, "damaged.json");
    assert!(msg.contains("line") && msg.contains("twelve"), "{msg}");
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    // Unclosed: the JSON ends early.
    let deep = vec![b'['; 100_000];
    let err = Profile::from_slice(&deep).unwrap_err();
    assert!(matches!(err, ProfileError::Truncated { .. }), "{err:?}");

    // Closed: valid JSON, but an array.
    let mut closed = vec![b'['; 100_000];
    closed.extend(std::iter::repeat_n(b']', 100_000));
    let err = Profile::from_slice(&closed).unwrap_err();
    assert!(matches!(err, ProfileError::NotAProfile { .. }), "{err:?}");

    // Inside a profile's object, serde_json's recursion limit stops it.
    for tail in [&b""[..], b"]"] {
        let mut inside = b"{\"run\": ".to_vec();
        inside.extend(std::iter::repeat_n(b'[', 100_000));
        inside.extend(tail);
        let err = Profile::from_slice(&inside).unwrap_err();
        assert!(matches!(err, ProfileError::NotJson { .. }), "{err:?}");
        assert!(err.to_string().contains("recursion limit"), "{err}");
    }

    let mut objects = Vec::new();
    for _ in 0..100_000 {
        objects.extend_from_slice(b"{\"a\":");
    }
    assert!(Profile::from_slice(&objects).is_err());
}

#[test]
fn reader_and_bom() {
    let mut bytes = b"\xef\xbb\xbf".to_vec();
    bytes.extend(common::sample_bytes());
    let profile = Profile::from_reader(&bytes[..]).unwrap();
    assert_eq!(profile.run.tool, "malt-1.6.2");
    let err = Profile::from_reader(&b""[..]).unwrap_err();
    assert!(err.to_string().contains("<input>"), "{err}");
}

#[test]
fn write_to_path_then_read() {
    let dir = common::scratch("write");
    let profile = Profile::from_path(common::sample_path()).unwrap();
    let out = dir.join("out.json");
    profile.write_to_path(&out).unwrap();
    assert_eq!(Profile::from_path(&out).unwrap(), profile);
    assert!(!dir.join("out.json.tmp").exists());
    let err = profile
        .write_to_path(dir.join("no/such/dir/out.json"))
        .unwrap_err();
    assert!(matches!(err, ProfileError::Write { .. }), "{err:?}");
    one_line_naming(&err, "out.json");
}
