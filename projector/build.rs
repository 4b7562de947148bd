//! The commit this binary is built from (`GIT_COMMIT`), for `--version`.

include!("../shared/build/git_commit.rs");

fn main() {
    emit_git_commit();
}
