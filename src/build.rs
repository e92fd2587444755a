//! What a build without some of its features says when asked for them:
//! each refusal names the feature and the cargo command that builds it
//! (README: Install), in one wording, the library's and the CLI's.

/// Why `what` is refused by a build without `feature`, and how to build
/// with it: the one wording of the library's refusals (a bundle, a field
/// of a frame, a command's action) and the CLI's (a subcommand, a flag,
/// a request).
pub fn needs_feature(what: &str, feature: &str) -> String {
    format!(
        "{what} is not in this build: it needs the `{feature}` feature \
         (cargo build --release --features {feature})"
    )
}
