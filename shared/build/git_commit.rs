// Included by the binaries' build scripts (`include!`): the commit they are built from, for `--version`
// and the traces. `GIT_COMMIT` when given (an image build, where the context has no `.git`), else
// `git rev-parse`, else `unknown`.

fn emit_git_commit() {
    println!("cargo:rerun-if-env-changed=GIT_COMMIT");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git").args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    // HEAD in the checkout's own git directory, the refs in the common one: they differ in a worktree,
    // whose `.git` is a file. Only paths that exist: cargo runs a build script again at every build while
    // one it watches is missing.
    let dir = |flag: &str| git(&["rev-parse", "--path-format=absolute", flag]).map(std::path::PathBuf::from);
    let (own, common) = (dir("--git-dir"), dir("--git-common-dir"));
    let watched = [(own, "HEAD"), (common.clone(), "refs"), (common, "packed-refs")];
    for path in watched.into_iter().filter_map(|(dir, name)| Some(dir?.join(name))) {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let from_git = || git(&["rev-parse", "--short=12", "HEAD"]);
    let commit = std::env::var("GIT_COMMIT").ok().filter(|c| !c.trim().is_empty()).or_else(from_git);
    println!("cargo:rustc-env=GIT_COMMIT={}", commit.unwrap_or_else(|| "unknown".into()));
}
