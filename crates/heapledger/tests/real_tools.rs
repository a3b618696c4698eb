//! Acceptance point 5, real tools: python with threads, `bash -c` with
//! subshells and pipes, `git` committing in a temporary repository, `gcc`
//! compiling a file. Each runs exactly as without heapledger (same stdout,
//! same stderr since `-q` adds nothing, same exit code) and leaves a profile
//! that reads and has allocations.

mod support;

use std::path::Path;

use support::*;

/// The profiles heapledger wrote for child processes, beside `out`, in
/// `<stem>.children/`: (file name, profile).
fn child_profiles(out: &Path) -> Vec<(String, heapledger_profile::Profile)> {
    let stem = out.file_stem().unwrap().to_string_lossy().into_owned();
    let dir = out.with_file_name(format!("{stem}.children"));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut v: Vec<_> = entries
        .map(|e| e.unwrap().path())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, load_profile(&p))
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[test]
fn python_with_threads() {
    let python = real_python();
    let tmp = TempDir::new("py-threads");
    let out = tmp.join("p.json");
    // PYTHONMALLOC=malloc so that the threads' allocations reach malloc
    // (pymalloc would serve most of them from its arenas).
    let cmd = Cmd::new(&python)
        .arg(programs_dir().join("py_threads.py"))
        .env("PYTHONMALLOC", "malloc")
        .cwd(tmp.path());
    let (plain, _) = assert_same_run(&cmd, &cmd, &out, true);
    assert_eq!(plain.code, Some(0), "py_threads.py fails: {}", plain.stderr);
    assert_eq!(
        plain.stdout, "results: [19995, 39994, 59997, 79997]\ntotal: 199983\n",
        "py_threads.py's own output changed"
    );
    let p = assert_profile_with_allocations(&out, "python threads");
    // The main thread and the 4 workers each allocated.
    let allocating = p
        .threads
        .iter()
        .filter(|t| t.stats.malloc.count + t.stats.calloc.count + t.stats.realloc.count > 0)
        .count();
    assert!(
        allocating >= 5,
        "python threads: only {allocating} threads with allocations in the profile (of {}), expected the main thread and 4 workers",
        p.threads.len()
    );
    let ext = p.heapledger.as_ref().expect("no heapledger section");
    assert_eq!(ext.exit.code, Some(0));
}

#[test]
fn bash_with_subshells_and_pipes() {
    require_tool("bash", "bash");
    let tmp = TempDir::new("bash");
    let out = tmp.join("p.json");
    let script = "(echo a; echo b) | sort -r; x=$(echo sub); echo $x | tr a-z A-Z; exit 3";
    let cmd = Cmd::new("bash")
        .args(["-c", script])
        .env("LC_ALL", "C")
        .cwd(tmp.path());
    let (plain, traced) = assert_same_run(&cmd, &cmd, &out, true);
    assert_eq!(plain.stdout, "b\na\nSUB\n");
    assert_eq!(traced.code, Some(3), "bash's exit code is not passed on");
    let p = assert_profile_with_allocations(&out, "bash -c");
    assert_eq!(p.heapledger.as_ref().unwrap().exit.code, Some(3));

    // The subshells, `sort` and `tr` left their own profiles.
    let children = child_profiles(&out);
    let names: Vec<&str> = children.iter().map(|(n, _)| n.as_str()).collect();
    for exe in ["sort", "tr"] {
        assert!(
            names
                .iter()
                .any(|n| n.starts_with(&format!("heapledger-{exe}-"))),
            "bash -c: no child profile for `{exe}` in {:?}",
            names
        );
    }
}

#[test]
fn git_commit_in_a_temporary_repository() {
    require_tool("git", "git");
    let tmp = TempDir::new("git");
    let out = tmp.join("p.json");
    let home = tmp.join("home");
    std::fs::create_dir(&home).unwrap();

    // Two identical repositories: one commits plainly, one under heapledger.
    // Fixed dates and identity make both commits the same object.
    let git = |dir: &Path| {
        Cmd::new("git")
            .env("HOME", &home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_DATE", "2024-01-02T03:04:05Z")
            .env("GIT_COMMITTER_DATE", "2024-01-02T03:04:05Z")
            .env("LC_ALL", "C")
            .cwd(dir)
    };
    let mut repos = Vec::new();
    for name in ["plain", "traced"] {
        let dir = tmp.join(name);
        std::fs::create_dir(&dir).unwrap();
        let o = git(&dir)
            .args(["-c", "init.defaultBranch=main", "init", "-q"])
            .run_plain();
        assert_eq!(o.code, Some(0), "git init: {}", o.stderr);
        std::fs::write(dir.join("hello.txt"), "hello, heapledger\n").unwrap();
        std::fs::write(dir.join("notes.md"), "# notes\n\nsome text\n").unwrap();
        let o = git(&dir).args(["add", "."]).run_plain();
        assert_eq!(o.code, Some(0), "git add: {}", o.stderr);
        repos.push(dir);
    }
    let commit = |dir: &Path| {
        git(dir).args([
            "-c",
            "user.name=Mem Trail",
            "-c",
            "user.email=heapledger@example.com",
            "commit",
            "-m",
            "first commit",
        ])
    };
    let (plain, _) = assert_same_run(&commit(&repos[0]), &commit(&repos[1]), &out, true);
    assert_eq!(plain.code, Some(0), "git commit fails: {}", plain.stderr);

    // The commit happened, and is the very same commit.
    let head = |dir: &Path| {
        let o = git(dir).args(["rev-parse", "HEAD"]).run_plain();
        assert_eq!(o.code, Some(0), "git rev-parse: {}", o.stderr);
        o.stdout.trim().to_owned()
    };
    let (h_plain, h_traced) = (head(&repos[0]), head(&repos[1]));
    assert_eq!(h_plain.len(), 40, "no commit in the plain repository");
    assert_eq!(
        h_traced, h_plain,
        "the commit made under heapledger differs from the plain one"
    );
    let log = git(&repos[1])
        .args(["log", "--format=%s|%an|%ae", "--name-only"])
        .run_plain();
    assert_eq!(
        log.stdout,
        "first commit|Mem Trail|heapledger@example.com\n\nhello.txt\nnotes.md\n"
    );
    let status = git(&repos[1]).args(["status", "--porcelain"]).run_plain();
    assert_eq!(
        status.stdout, "",
        "the work tree is not clean after the commit"
    );

    assert_profile_with_allocations(&out, "git commit");
}

#[test]
fn gcc_compiling_a_file() {
    require_tool("gcc", "gcc");
    let tmp = TempDir::new("gcc");
    let out = tmp.join("p.json");
    let mut dirs = Vec::new();
    for name in ["plain", "traced"] {
        let dir = tmp.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::copy(programs_dir().join("hello.c"), dir.join("hello.c")).unwrap();
        dirs.push(dir);
    }
    let gcc = |dir: &Path| {
        Cmd::new("gcc")
            .args(["-O1", "-Wall", "-o", "hello", "hello.c"])
            .env("LC_ALL", "C")
            .cwd(dir)
    };
    let (plain, _) = assert_same_run(&gcc(&dirs[0]), &gcc(&dirs[1]), &out, true);
    assert_eq!(plain.code, Some(0), "gcc fails: {}", plain.stderr);

    // The binary built under heapledger runs, and is the same file.
    let built = dirs[1].join("hello");
    let run = Cmd::new(&built).arg("10").run_plain();
    assert_eq!(run.code, Some(0));
    assert_eq!(run.stdout, "sum of squares to 10: 385\n");
    let a = std::fs::read(dirs[0].join("hello")).unwrap();
    let b = std::fs::read(&built).unwrap();
    assert!(
        a == b,
        "gcc under heapledger built a different binary than plain gcc"
    );

    assert_profile_with_allocations(&out, "gcc");
    // gcc is a driver: the compiler proper (cc1) runs as a child, with a
    // profile of its own.
    let children = child_profiles(&out);
    let cc1 = children
        .iter()
        .find(|(n, _)| n.starts_with("heapledger-cc1-"))
        .unwrap_or_else(|| {
            panic!(
                "gcc: no profile of cc1 among the children: {:?}",
                children.iter().map(|(n, _)| n).collect::<Vec<_>>()
            )
        });
    assert!(alloc_calls(&cc1.1) > 0, "cc1's profile has no allocations");
}
